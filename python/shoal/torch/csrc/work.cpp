/* Works, the completion thread, and the process group's life: joining the
 * shoal communicator through the store and tearing it down (see
 * shoal_c10d.hpp). */
#include "shoal_c10d.hpp"

#include <Python.h>

#include <cstring>
#include <stdexcept>

namespace shoal_c10d {

WorkShoal::WorkShoal(shoal_comm_t comm, ShoalOp *op, c10d::OpType type,
                     std::vector<at::Tensor> outputs, std::chrono::milliseconds timeout)
    : Work(-1, type), comm_(comm), op_(op), call_(op->call), outputs_(std::move(outputs)),
      timeout_(timeout),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get())))
{
}

bool WorkShoal::claim()
{
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_ || claimed_)
        return false;
    claimed_ = true;
    return true;
}

void WorkShoal::awaitCompletion()
{
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return completed_; });
}

bool WorkShoal::wait(std::chrono::milliseconds timeout)
{
    /* After complete() op_ may be gone; claim() looks at completed_ under
     * the lock that complete() takes, and the completion thread frees the
     * operation only once complete() has returned. */
    if (timeout == kNoTimeout && claim())
        complete(run_op(comm_, *op_));
    const std::chrono::milliseconds limit = timeout == kNoTimeout ? timeout_ : timeout;
    std::unique_lock<std::mutex> lock(mutex_);
    /* shoal's own deadline (SHOAL_TIMEOUT) ends every operation; this one
     * is the caller's, and leaves the operation in flight, its tensors
     * kept, when it expires. */
    const bool done = cv_.wait_for(lock, limit, [&] { return completed_; });
    TORCH_CHECK(done, "shoal: ", call_, " did not complete within ", limit.count(),
                " ms (the operation stays in flight until shoal's deadline, SHOAL_TIMEOUT)");
    if (exception_)
        std::rethrow_exception(exception_);
    return true;
}

std::vector<at::Tensor> WorkShoal::result()
{
    return outputs_;
}

c10::intrusive_ptr<c10::ivalue::Future> WorkShoal::getFuture()
{
    return future_;
}

void WorkShoal::abort()
{
    TORCH_CHECK(false, "shoal: Work.abort is not supported (destroy the process group, or let "
                "shoal's deadline end the operation)");
}

void WorkShoal::complete(std::exception_ptr error)
{
    finish(error);
    /* The Future's callbacks run here, on the completion thread. */
    if (error)
        future_->setError(error);
    else
        future_->markCompleted(c10::IValue(outputs_));
}

/* The message of a failed shoal call, with shoal's reason for it. */
static std::string failure_message(shoal_comm_t comm, const char *call, shoal_status_t status)
{
    const char *why = shoal_comm_last_error(comm);
    std::string m = std::string("shoal: ") + call + ": ";
    m += why && *why ? why : "no reason recorded";
    m += std::string(" (") + shoal_status_string(status) + ")";
    return m;
}

void ProcessGroupShoal::fail(const char *call, shoal_status_t status) const
{
    throw std::runtime_error(failure_message(comm_, call, status));
}

ProcessGroupShoal::ProcessGroupShoal(const c10::intrusive_ptr<c10d::Store> &store, int rank,
                                     int size, std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size), timeout_(timeout)
{
    /* The store may outlive a process group of the same name (a
     * destroy_process_group and a new init_process_group over torchrun's
     * store keep it): each group made over this prefix takes the next
     * generation's key. Every member adds before it joins, and a join
     * completes only when all have, so the tickets of one generation are
     * exactly the next size ones. */
    const int64_t ticket = store->add("shoal/joined", 1);
    const std::string key = "shoal/unique_id/" + std::to_string((ticket - 1) / size);
    shoal_unique_id_t id;
    if (rank == 0) {
        shoal_status_t s = shoal_get_unique_id(&id);
        if (s != SHOAL_OK)
            fail("shoal_get_unique_id", s);
        store->set(key, std::vector<uint8_t>(id.bytes, id.bytes + sizeof(id.bytes)));
    } else {
        store->wait({key}, timeout);
        std::vector<uint8_t> v = store->get(key);
        TORCH_CHECK(v.size() == sizeof(id.bytes), "shoal: the store's unique id under ", key,
                    " has ", v.size(), " bytes, not ", sizeof(id.bytes));
        std::memcpy(id.bytes, v.data(), sizeof(id.bytes));
    }
    shoal_status_t s = shoal_comm_init(size, &id, rank, &comm_);
    if (s != SHOAL_OK)
        fail("shoal_comm_init", s);
    /* The completion thread waits every request issued here, in issue
     * order, and so drives them; shoal's progress thread would only add
     * two wake-ups to each call. */
    s = shoal_comm_set_progress(comm_, SHOAL_PROGRESS_CALLER);
    if (s != SHOAL_OK) {
        std::string why = failure_message(comm_, "shoal_comm_set_progress", s);
        shoal_comm_destroy(comm_);
        comm_ = nullptr;
        throw std::runtime_error(why);
    }
    completion_ = std::thread(&ProcessGroupShoal::completionLoop, this);
}

ProcessGroupShoal::~ProcessGroupShoal()
{
    /* A Future callback or a tensor's deleter may need the GIL on the
     * completion thread: never hold it while waiting for that thread. */
    PyThreadState *saved = nullptr;
    if (Py_IsInitialized() && !_Py_IsFinalizing() && PyGILState_Check())
        saved = PyEval_SaveThread();
    {
        std::lock_guard<std::mutex> lock(queue_lock_);
        stop_ = true;
    }
    queue_cv_.notify_all();
    if (completion_.joinable())
        completion_.join();
    if (comm_)
        shoal_comm_destroy(comm_);
    if (saved)
        PyEval_RestoreThread(saved);
}

void ProcessGroupShoal::completionLoop()
{
    for (;;) {
        ShoalOp *op;
        {
            std::unique_lock<std::mutex> lock(queue_lock_);
            queue_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
            if (queue_.empty())
                return; /* stopping, and every operation completed */
            op = queue_.front().get();
        }
        /* An operation whose wait() claimed it first is that thread's to
         * run and complete; it stays queued until then. */
        const bool mine = !op->work || op->work->claim();
        std::exception_ptr error;
        if (mine)
            error = run_op(comm_, *op);
        else
            op->work->awaitCompletion();
        std::unique_ptr<ShoalOp> done;
        {
            std::lock_guard<std::mutex> lock(queue_lock_);
            done = std::move(queue_.front());
            queue_.pop_front();
        }
        if (mine && done->work)
            done->work->complete(error);
    }
}

std::exception_ptr run_op(shoal_comm_t comm, ShoalOp &op)
{
    shoal_status_t first = SHOAL_OK;
    std::string why;
    for (shoal_request_t &req : op.reqs) {
        shoal_status_t s = shoal_wait(&req);
        if (s != SHOAL_OK && first == SHOAL_OK) {
            first = s;
            why = failure_message(comm, op.call, s);
        }
    }
    if (first != SHOAL_OK)
        return std::make_exception_ptr(std::runtime_error(why));
    if (op.finish) {
        try {
            op.finish();
        } catch (...) {
            return std::current_exception();
        }
    }
    return nullptr;
}

c10::intrusive_ptr<Work> ProcessGroupShoal::submit(std::unique_ptr<ShoalOp> op,
                                                   c10d::OpType type,
                                                   std::vector<at::Tensor> outputs,
                                                   std::chrono::milliseconds timeout,
                                                   const std::vector<Issue> &issues)
{
    std::lock_guard<std::mutex> issue(issue_lock_);
    shoal_status_t s = SHOAL_OK;
    for (const Issue &fn : issues) {
        shoal_request_t req = nullptr;
        s = fn(&req);
        if (s != SHOAL_OK)
            break;
        op->reqs.push_back(req);
    }
    std::string why;
    c10::intrusive_ptr<WorkShoal> work;
    if (s != SHOAL_OK)
        why = failure_message(comm_, op->call, s);
    else
        work = op->work = c10::make_intrusive<WorkShoal>(comm_, op.get(), type,
                                                         std::move(outputs), timeoutOf(timeout));
    /* Requests issued before a refusal are still waited, by the completion
     * thread, with nobody told. */
    if (s == SHOAL_OK || !op->reqs.empty()) {
        std::lock_guard<std::mutex> lock(queue_lock_);
        queue_.push_back(std::move(op));
    }
    queue_cv_.notify_one();
    if (s != SHOAL_OK)
        throw std::runtime_error(why);
    return work;
}

std::chrono::milliseconds ProcessGroupShoal::timeoutOf(std::chrono::milliseconds requested) const
{
    return requested == c10d::kUnsetTimeout ? timeout_ : requested;
}

shoal_status_t ProcessGroupShoal::withOp(const Reduction &r,
                                         const std::function<shoal_status_t(shoal_op_t)> &fn)
{
    if (!r.premul)
        return fn(r.op);
    shoal_op_t op;
    shoal_status_t s = shoal_op_create_premul_sum(comm_, r.factor.data_ptr(), r.dtype, &op);
    if (s != SHOAL_OK)
        return s;
    /* The call copies the factor when it is issued: the op may go at once. */
    s = fn(op);
    shoal_op_destroy(op, comm_);
    return s;
}

} // namespace shoal_c10d
