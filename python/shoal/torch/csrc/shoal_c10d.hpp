/*
 * The c10d backend "shoal": a c10d::ProcessGroup over one shoal
 * communicator, for CPU tensors (torch 1.13).
 *
 * Threads. Every operation is issued on the calling thread through shoal's
 * non-blocking form, so operations reach shoal in the order the program
 * calls them; issue_lock_ keeps the completion queue in that same order
 * when several threads call. One completion thread per process group waits
 * the queued requests in issue order (shoal runs a communicator's
 * operations one at a time in issue order; a send and a receive may finish
 * out of order, which only delays the later one's notification), runs the
 * operation's copy-out where its result was staged, and completes its Work
 * and Future, unless a wait() without a timeout claimed the operation
 * first and does all that itself on the caller's thread (WorkShoal). The
 * claim makes sure one thread alone waits and frees an operation's shoal
 * requests (shoal.h: one thread at a time per request).
 *
 * Ownership. An operation keeps every tensor whose memory shoal reads or
 * writes (and the all-to-all-v count arrays) until its requests completed,
 * whatever happens to the Work the caller holds.
 */
#pragma once

#include <shoal.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace shoal_c10d {

using Work = c10d::Work;

struct ShoalOp;

/* The Work of one operation, completed once (complete) by whichever thread
 * claims the operation first: the completion thread, or a wait() called
 * without a timeout, which then waits its requests itself. That spares a
 * blocking call two hand-offs between threads (the calling thread runs
 * shoal's task, as shoal's own blocking calls do) and keeps the operation
 * on the thread the scheduler already placed. wait() with a timeout, or
 * on an operation the completion thread holds, waits for complete(),
 * bounded by that timeout (the process group's when the call sets none). */
class WorkShoal : public Work {
  public:
    /* op (on comm) is what a claiming wait() runs; it lives until
     * complete() has returned (the completion thread frees it only after
     * that). */
    WorkShoal(shoal_comm_t comm, ShoalOp *op, c10d::OpType type,
              std::vector<at::Tensor> outputs, std::chrono::milliseconds timeout);

    bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
    std::vector<at::Tensor> result() override;
    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
    void abort() override;

    /* Mark the operation done: error is null on success. The Future gets
     * the output tensors, or the error. */
    void complete(std::exception_ptr error);

    /* Claim the operation for the calling thread: true when nobody had. */
    bool claim();
    /* Wait for complete(), however long it takes (the claimant's waits
     * are bounded by shoal's deadline). */
    void awaitCompletion();

  private:
    shoal_comm_t comm_;
    ShoalOp *op_;
    bool claimed_ = false; /* under mutex_ */
    const char *call_;
    std::vector<at::Tensor> outputs_;
    std::chrono::milliseconds timeout_;
    c10::intrusive_ptr<c10::ivalue::Future> future_;
};

/* What a reduction becomes in shoal's terms: the element type, the op, and
 * for a pre-multiplied sum the factor as one element of that type (the op
 * itself is made, used and destroyed inside the issue, shoal.h's rule for
 * the pre-multiplied sum calls). */
struct Reduction {
    shoal_dtype_t dtype;
    shoal_op_t op;
    bool premul;
    at::Tensor factor;
};

/* One issued operation: its requests and what they borrow. */
struct ShoalOp {
    const char *call = nullptr;
    std::vector<shoal_request_t> reqs;
    std::vector<at::Tensor> keep;     /* the memory the requests read or write */
    std::vector<size_t> counts;       /* all-to-all-v: counts and displacements */
    std::function<void()> finish;     /* on success: copy staged results out */
    c10::intrusive_ptr<WorkShoal> work;
};

/* Wait op's requests in order (each bounded by shoal's deadline) and run
 * its copy-out: null on success, else the first failure with shoal's
 * reason. The caller must have claimed op (or op has no Work). */
std::exception_ptr run_op(shoal_comm_t comm, ShoalOp &op);

class ProcessGroupShoal : public c10d::ProcessGroup {
  public:
    /* Collective over the group: rank 0 makes shoal's unique id and hands
     * it to the others through store (the group's prefix store), then every
     * rank joins the communicator. */
    ProcessGroupShoal(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                      std::chrono::milliseconds timeout);
    /* Waits for the operations still queued (each bounded by shoal's
     * deadline), stops the completion thread and destroys the communicator. */
    ~ProcessGroupShoal() override;

    const std::string getBackendName() const override { return "shoal"; }

    /* The shoal communicator, for programs that call shoal on it directly
     * (the Python package's compressors). Owned by the process group. */
    shoal_comm_t comm() const { return comm_; }

    c10::intrusive_ptr<Work> broadcast(std::vector<at::Tensor> &tensors,
                                       const c10d::BroadcastOptions &opts) override;
    c10::intrusive_ptr<Work> allreduce(std::vector<at::Tensor> &tensors,
                                       const c10d::AllreduceOptions &opts) override;
    c10::intrusive_ptr<Work> allreduce_coalesced(std::vector<at::Tensor> &tensors,
                                                 const c10d::AllreduceCoalescedOptions &opts)
        override;
    c10::intrusive_ptr<Work> reduce(std::vector<at::Tensor> &tensors,
                                    const c10d::ReduceOptions &opts) override;
    c10::intrusive_ptr<Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                       std::vector<at::Tensor> &inputs,
                                       const c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<Work> _allgather_base(at::Tensor &output, at::Tensor &input,
                                             const c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<Work> allgather_coalesced(std::vector<std::vector<at::Tensor>> &outputs,
                                                 std::vector<at::Tensor> &inputs,
                                                 const c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<Work> gather(std::vector<std::vector<at::Tensor>> &outputs,
                                    std::vector<at::Tensor> &inputs,
                                    const c10d::GatherOptions &opts) override;
    c10::intrusive_ptr<Work> scatter(std::vector<at::Tensor> &outputs,
                                     std::vector<std::vector<at::Tensor>> &inputs,
                                     const c10d::ScatterOptions &opts) override;
    c10::intrusive_ptr<Work> reduce_scatter(std::vector<at::Tensor> &outputs,
                                            std::vector<std::vector<at::Tensor>> &inputs,
                                            const c10d::ReduceScatterOptions &opts) override;
    c10::intrusive_ptr<Work> _reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                                                  const c10d::ReduceScatterOptions &opts)
        override;
    c10::intrusive_ptr<Work> alltoall_base(at::Tensor &output, at::Tensor &input,
                                           std::vector<int64_t> &output_splits,
                                           std::vector<int64_t> &input_splits,
                                           const c10d::AllToAllOptions &opts) override;
    c10::intrusive_ptr<Work> alltoall(std::vector<at::Tensor> &outputs,
                                      std::vector<at::Tensor> &inputs,
                                      const c10d::AllToAllOptions &opts) override;
    c10::intrusive_ptr<Work> send(std::vector<at::Tensor> &tensors, int dst, int tag) override;
    c10::intrusive_ptr<Work> recv(std::vector<at::Tensor> &tensors, int src, int tag) override;
    c10::intrusive_ptr<Work> recvAnysource(std::vector<at::Tensor> &tensors, int tag) override;
    c10::intrusive_ptr<Work> barrier(const c10d::BarrierOptions &opts) override;
    void monitoredBarrier(const c10d::BarrierOptions &opts, bool wait_all_ranks) override;

  private:
    using Issue = std::function<shoal_status_t(shoal_request_t *)>;

    /* Issue op's requests in order on this thread and queue op for the
     * completion thread; returns its Work. A refused issue throws shoal's
     * reason; requests issued before it are still waited. */
    c10::intrusive_ptr<Work> submit(std::unique_ptr<ShoalOp> op, c10d::OpType type,
                                    std::vector<at::Tensor> outputs,
                                    std::chrono::milliseconds timeout,
                                    const std::vector<Issue> &issues);
    /* Run fn with r's shoal op (a pre-multiplied sum made for the call). */
    shoal_status_t withOp(const Reduction &r, const std::function<shoal_status_t(shoal_op_t)> &fn);
    std::chrono::milliseconds timeoutOf(std::chrono::milliseconds requested) const;
    [[noreturn]] void fail(const char *call, shoal_status_t status) const;
    void completionLoop();

    shoal_comm_t comm_ = nullptr;
    std::chrono::milliseconds timeout_;
    std::mutex issue_lock_;
    std::mutex queue_lock_;
    std::condition_variable queue_cv_;
    std::deque<std::unique_ptr<ShoalOp>> queue_;
    bool stop_ = false;
    std::thread completion_;
};

/* Checks and mappings (types.cpp). Each throws a c10::Error that names the
 * call. */
void check_tensor(const char *call, const at::Tensor &t);
const at::Tensor &one_tensor(const char *call, const std::vector<at::Tensor> &tensors);
/* shoal's type for t's elements in a reduction. */
shoal_dtype_t reduce_dtype(const char *call, at::ScalarType t);
/* The shoal type that moves t's elements, and how many of them make one
 * element of t (1 for a type shoal has; its size in bytes otherwise). */
struct Elem {
    shoal_dtype_t dtype;
    size_t per;
};
Elem move_elem(at::ScalarType t);
Reduction reduction(const char *call, const c10d::ReduceOp &op, at::ScalarType t);

} // namespace shoal_c10d
