/* The collectives of ProcessGroupShoal: each checks its tensors, maps
 * them onto one or more of shoal's non-blocking calls, and submits them
 * (see shoal_c10d.hpp). Calls whose tensors are lists (all_gather into a
 * list, all_to_all of a list, gather, scatter, reduce_scatter of a list)
 * move one flat staging tensor: the inputs are copied into it at issue,
 * the outputs out of it by the completion thread. */
#include "shoal_c10d.hpp"

namespace shoal_c10d {

namespace {

std::unique_ptr<ShoalOp> new_op(const char *call, std::vector<at::Tensor> keep)
{
    auto op = std::make_unique<ShoalOp>();
    op->call = call;
    op->keep = std::move(keep);
    return op;
}

void check_dtype(const char *call, const at::Tensor &t, at::ScalarType want)
{
    TORCH_CHECK(t.scalar_type() == want, "shoal: ", call, ": tensors of dtype ", t.scalar_type(),
                " and ", want, " in one call");
}

void check_root(const char *call, int root, int size)
{
    TORCH_CHECK(root >= 0 && root < size, "shoal: ", call, ": root rank ", root,
                " is outside the group of ", size);
}

void check_tag(const char *call, int tag)
{
    TORCH_CHECK(tag == 0, "shoal: ", call, ": tag ", tag,
                " is not supported: shoal matches messages between two ranks in the order "
                "they were sent, and takes tag 0 only");
}

/* A list of size tensors of numel elements each, all of dtype. */
void check_list(const char *call, const std::vector<at::Tensor> &list, int size, int64_t numel,
                at::ScalarType dtype)
{
    TORCH_CHECK((int)list.size() == size, "shoal: ", call, ": takes a list of ", size,
                " tensors (one per rank), not ", list.size());
    for (const at::Tensor &t : list) {
        check_tensor(call, t);
        check_dtype(call, t, dtype);
        TORCH_CHECK(t.numel() == numel, "shoal: ", call, ": a tensor of the list has ",
                    t.numel(), " elements where the call's tensor has ", numel);
    }
}

/* The list's tensors one after the other, in one new tensor. */
at::Tensor flatten(const std::vector<at::Tensor> &list, at::ScalarType dtype)
{
    int64_t total = 0;
    for (const at::Tensor &t : list)
        total += t.numel();
    at::Tensor flat = at::empty({total}, at::TensorOptions().dtype(dtype));
    int64_t off = 0;
    for (const at::Tensor &t : list) {
        flat.narrow(0, off, t.numel()).copy_(t.reshape({-1}));
        off += t.numel();
    }
    return flat;
}

/* The copy-out of a staged result into the list's tensors. */
std::function<void()> unflatten(at::Tensor flat, std::vector<at::Tensor> list)
{
    return [flat, list]() {
        int64_t off = 0;
        for (const at::Tensor &t : list) {
            at::Tensor dst = t;
            dst.view({-1}).copy_(flat.narrow(0, off, t.numel()));
            off += t.numel();
        }
    };
}

std::vector<at::Tensor> concat(std::vector<at::Tensor> a, const std::vector<at::Tensor> &b)
{
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

void *ptr(const at::Tensor &t)
{
    return t.numel() ? t.data_ptr() : nullptr;
}

size_t count(const at::Tensor &t, const Elem &e)
{
    return (size_t)t.numel() * e.per;
}

} // namespace

c10::intrusive_ptr<Work> ProcessGroupShoal::broadcast(std::vector<at::Tensor> &tensors,
                                                      const c10d::BroadcastOptions &opts)
{
    static const char call[] = "broadcast";
    const at::Tensor &t = one_tensor(call, tensors);
    check_root(call, (int)opts.rootRank, size_);
    TORCH_CHECK(opts.rootTensor == 0, "shoal: ", call, ": root tensor ", opts.rootTensor,
                " of one tensor");
    Elem e = move_elem(t.scalar_type());
    int root = (int)opts.rootRank;
    auto op = new_op(call, tensors);
    return submit(std::move(op), c10d::OpType::BROADCAST, tensors, opts.timeout,
                  {[&](shoal_request_t *req) {
                      return shoal_ibroadcast(ptr(t), ptr(t), count(t, e), e.dtype, root, comm_,
                                              req);
                  }});
}

c10::intrusive_ptr<Work> ProcessGroupShoal::allreduce(std::vector<at::Tensor> &tensors,
                                                      const c10d::AllreduceOptions &opts)
{
    static const char call[] = "allreduce";
    const at::Tensor &t = one_tensor(call, tensors);
    Reduction r = reduction(call, opts.reduceOp, t.scalar_type());
    auto op = new_op(call, tensors);
    return submit(std::move(op), c10d::OpType::ALLREDUCE, tensors, opts.timeout,
                  {[&](shoal_request_t *req) {
                      return withOp(r, [&](shoal_op_t o) {
                          return shoal_iallreduce(ptr(t), ptr(t), (size_t)t.numel(), r.dtype, o,
                                                  comm_, req);
                      });
                  }});
}

c10::intrusive_ptr<Work> ProcessGroupShoal::allreduce_coalesced(
    std::vector<at::Tensor> &tensors, const c10d::AllreduceCoalescedOptions &opts)
{
    static const char call[] = "allreduce_coalesced";
    std::vector<Reduction> rs;
    for (const at::Tensor &t : tensors) {
        check_tensor(call, t);
        rs.push_back(reduction(call, opts.reduceOp, t.scalar_type()));
    }
    /* One all-reduce per tensor, issued back to back. */
    std::vector<Issue> issues;
    for (size_t i = 0; i < tensors.size(); i++) {
        issues.push_back([this, &tensors, &rs, i](shoal_request_t *req) {
            const at::Tensor &t = tensors[i];
            const Reduction &r = rs[i];
            return withOp(r, [&](shoal_op_t o) {
                return shoal_iallreduce(ptr(t), ptr(t), (size_t)t.numel(), r.dtype, o, comm_,
                                        req);
            });
        });
    }
    auto op = new_op(call, tensors);
    return submit(std::move(op), c10d::OpType::ALLREDUCE_COALESCED, tensors, opts.timeout,
                  issues);
}

c10::intrusive_ptr<Work> ProcessGroupShoal::reduce(std::vector<at::Tensor> &tensors,
                                                   const c10d::ReduceOptions &opts)
{
    static const char call[] = "reduce";
    const at::Tensor &t = one_tensor(call, tensors);
    check_root(call, (int)opts.rootRank, size_);
    TORCH_CHECK(opts.rootTensor == 0, "shoal: ", call, ": root tensor ", opts.rootTensor,
                " of one tensor");
    Reduction r = reduction(call, opts.reduceOp, t.scalar_type());
    int root = (int)opts.rootRank;
    /* Only the root's tensor receives the result; the others keep their
     * input. */
    void *out = rank_ == root ? ptr(t) : nullptr;
    auto op = new_op(call, tensors);
    return submit(std::move(op), c10d::OpType::REDUCE, tensors, opts.timeout,
                  {[&](shoal_request_t *req) {
                      return withOp(r, [&](shoal_op_t o) {
                          return shoal_ireduce(ptr(t), out, (size_t)t.numel(), r.dtype, o, root,
                                               comm_, req);
                      });
                  }});
}

c10::intrusive_ptr<Work> ProcessGroupShoal::allgather(
    std::vector<std::vector<at::Tensor>> &outputs, std::vector<at::Tensor> &inputs,
    const c10d::AllgatherOptions &opts)
{
    static const char call[] = "allgather";
    const at::Tensor &in = one_tensor(call, inputs);
    TORCH_CHECK(outputs.size() == 1, "shoal: ", call, ": takes one list of outputs, not ",
                outputs.size());
    check_list(call, outputs[0], size_, in.numel(), in.scalar_type());
    Elem e = move_elem(in.scalar_type());
    at::Tensor flat = at::empty({(int64_t)size_ * in.numel()},
                                at::TensorOptions().dtype(in.scalar_type()));
    auto op = new_op(call, concat(inputs, {flat}));
    op->finish = unflatten(flat, outputs[0]);
    return submit(std::move(op), c10d::OpType::ALLGATHER, outputs[0], opts.timeout,
                  {[&](shoal_request_t *req) {
                      return shoal_iallgather(ptr(in), ptr(flat), count(in, e), e.dtype, comm_,
                                              req);
                  }});
}

c10::intrusive_ptr<Work> ProcessGroupShoal::_allgather_base(at::Tensor &output,
                                                            at::Tensor &input,
                                                            const c10d::AllgatherOptions &opts)
{
    static const char call[] = "_allgather_base";
    check_tensor(call, output);
    check_tensor(call, input);
    check_dtype(call, output, input.scalar_type());
    TORCH_CHECK(output.numel() == (int64_t)size_ * input.numel(), "shoal: ", call,
                ": the output has ", output.numel(), " elements, not the group's ", size_,
                " times the input's ", input.numel());
    Elem e = move_elem(input.scalar_type());
    auto op = new_op(call, {output, input});
    return submit(std::move(op), c10d::OpType::_ALLGATHER_BASE, {output}, opts.timeout,
                  {[&](shoal_request_t *req) {
                      return shoal_iallgather(ptr(input), ptr(output), count(input, e), e.dtype,
                                              comm_, req);
                  }});
}

c10::intrusive_ptr<Work> ProcessGroupShoal::allgather_coalesced(
    std::vector<std::vector<at::Tensor>> &outputs, std::vector<at::Tensor> &inputs,
    const c10d::AllgatherOptions &opts)
{
    TORCH_CHECK(false, "shoal: allgather_coalesced (all_gather_coalesced) is not supported by "
                "the shoal backend; call all_gather per tensor, or all_gather_into_tensor");
}

c10::intrusive_ptr<Work> ProcessGroupShoal::gather(std::vector<std::vector<at::Tensor>> &outputs,
                                                   std::vector<at::Tensor> &inputs,
                                                   const c10d::GatherOptions &opts)
{
    static const char call[] = "gather";
    const at::Tensor &in = one_tensor(call, inputs);
    int root = (int)opts.rootRank;
    check_root(call, root, size_);
    Elem e = move_elem(in.scalar_type());
    auto op = new_op(call, inputs);
    at::Tensor flat;
    std::vector<at::Tensor> outs;
    if (rank_ == root) {
        TORCH_CHECK(outputs.size() == 1, "shoal: ", call,
                    ": the root takes one list of outputs, not ", outputs.size());
        check_list(call, outputs[0], size_, in.numel(), in.scalar_type());
        flat = at::empty({(int64_t)size_ * in.numel()},
                         at::TensorOptions().dtype(in.scalar_type()));
        op->keep.push_back(flat);
        op->finish = unflatten(flat, outputs[0]);
        outs = outputs[0];
    } else {
        TORCH_CHECK(outputs.empty(), "shoal: ", call,
                    ": only the root takes a list of outputs");
    }
    return submit(std::move(op), c10d::OpType::GATHER, outs, opts.timeout,
                  {[&](shoal_request_t *req) {
                      return shoal_igather(ptr(in), flat.defined() ? ptr(flat) : nullptr,
                                           count(in, e), e.dtype, root, comm_, req);
                  }});
}

c10::intrusive_ptr<Work> ProcessGroupShoal::scatter(std::vector<at::Tensor> &outputs,
                                                    std::vector<std::vector<at::Tensor>> &inputs,
                                                    const c10d::ScatterOptions &opts)
{
    static const char call[] = "scatter";
    const at::Tensor &out = one_tensor(call, outputs);
    int root = (int)opts.rootRank;
    check_root(call, root, size_);
    Elem e = move_elem(out.scalar_type());
    auto op = new_op(call, outputs);
    at::Tensor flat;
    if (rank_ == root) {
        TORCH_CHECK(inputs.size() == 1, "shoal: ", call,
                    ": the root takes one list of inputs, not ", inputs.size());
        check_list(call, inputs[0], size_, out.numel(), out.scalar_type());
        flat = flatten(inputs[0], out.scalar_type());
        op->keep.push_back(flat);
    } else {
        TORCH_CHECK(inputs.empty(), "shoal: ", call, ": only the root takes a list of inputs");
    }
    return submit(std::move(op), c10d::OpType::SCATTER, outputs, opts.timeout,
                  {[&](shoal_request_t *req) {
                      return shoal_iscatter(flat.defined() ? ptr(flat) : nullptr, ptr(out),
                                            count(out, e), e.dtype, root, comm_, req);
                  }});
}

c10::intrusive_ptr<Work> ProcessGroupShoal::reduce_scatter(
    std::vector<at::Tensor> &outputs, std::vector<std::vector<at::Tensor>> &inputs,
    const c10d::ReduceScatterOptions &opts)
{
    static const char call[] = "reduce_scatter";
    const at::Tensor &out = one_tensor(call, outputs);
    TORCH_CHECK(inputs.size() == 1, "shoal: ", call, ": takes one list of inputs, not ",
                inputs.size());
    check_list(call, inputs[0], size_, out.numel(), out.scalar_type());
    Reduction r = reduction(call, opts.reduceOp, out.scalar_type());
    at::Tensor flat = flatten(inputs[0], out.scalar_type());
    auto op = new_op(call, {out, flat});
    return submit(std::move(op), c10d::OpType::REDUCE_SCATTER, outputs, opts.timeout,
                  {[&](shoal_request_t *req) {
                      return withOp(r, [&](shoal_op_t o) {
                          return shoal_ireduce_scatter(ptr(flat), ptr(out), (size_t)out.numel(),
                                                       r.dtype, o, comm_, req);
                      });
                  }});
}

c10::intrusive_ptr<Work> ProcessGroupShoal::_reduce_scatter_base(
    at::Tensor &output, at::Tensor &input, const c10d::ReduceScatterOptions &opts)
{
    static const char call[] = "_reduce_scatter_base";
    check_tensor(call, output);
    check_tensor(call, input);
    check_dtype(call, input, output.scalar_type());
    TORCH_CHECK(input.numel() == (int64_t)size_ * output.numel(), "shoal: ", call,
                ": the input has ", input.numel(), " elements, not the group's ", size_,
                " times the output's ", output.numel());
    Reduction r = reduction(call, opts.reduceOp, output.scalar_type());
    auto op = new_op(call, {output, input});
    return submit(std::move(op), c10d::OpType::_REDUCE_SCATTER_BASE, {output}, opts.timeout,
                  {[&](shoal_request_t *req) {
                      return withOp(r, [&](shoal_op_t o) {
                          return shoal_ireduce_scatter(ptr(input), ptr(output),
                                                       (size_t)output.numel(), r.dtype, o,
                                                       comm_, req);
                      });
                  }});
}

namespace {

/* The element counts of splitting t along dim 0 by splits (equal parts
 * when splits is empty). */
std::vector<size_t> split_counts(const char *call, const char *what, const at::Tensor &t,
                                 const std::vector<int64_t> &splits, int size, const Elem &e)
{
    const int64_t rows = t.dim() ? t.size(0) : 1;
    const int64_t row = rows ? t.numel() / rows : 0;
    std::vector<size_t> counts((size_t)size);
    if (splits.empty()) {
        TORCH_CHECK(rows % size == 0, "shoal: ", call, ": the ", what, "'s first dimension (",
                    rows, ") does not split into ", size, " equal parts");
        for (size_t j = 0; j < counts.size(); j++)
            counts[j] = (size_t)(rows / size * row) * e.per;
        return counts;
    }
    TORCH_CHECK((int)splits.size() == size, "shoal: ", call, ": ", splits.size(), " ", what,
                " split sizes for a group of ", size);
    int64_t sum = 0;
    for (size_t j = 0; j < counts.size(); j++) {
        TORCH_CHECK(splits[j] >= 0, "shoal: ", call, ": a negative ", what, " split size");
        sum += splits[j];
        counts[j] = (size_t)(splits[j] * row) * e.per;
    }
    TORCH_CHECK(sum == rows, "shoal: ", call, ": the ", what, " split sizes add up to ", sum,
                ", not to the ", what, "'s first dimension (", rows, ")");
    return counts;
}

/* counts, then their displacements, appended to v. */
void append_counts(std::vector<size_t> &v, const std::vector<size_t> &counts)
{
    size_t off = 0;
    v.insert(v.end(), counts.begin(), counts.end());
    for (size_t c : counts) {
        v.push_back(off);
        off += c;
    }
}

} // namespace

c10::intrusive_ptr<Work> ProcessGroupShoal::alltoall_base(at::Tensor &output, at::Tensor &input,
                                                          std::vector<int64_t> &output_splits,
                                                          std::vector<int64_t> &input_splits,
                                                          const c10d::AllToAllOptions &opts)
{
    static const char call[] = "alltoall_base";
    check_tensor(call, output);
    check_tensor(call, input);
    check_dtype(call, output, input.scalar_type());
    Elem e = move_elem(input.scalar_type());
    auto op = new_op(call, {output, input});
    if (output_splits.empty() && input_splits.empty()) {
        TORCH_CHECK(output.numel() == input.numel(), "shoal: ", call, ": the output has ",
                    output.numel(), " elements and the input ", input.numel());
        std::vector<size_t> c = split_counts(call, "input", input, {}, size_, e);
        size_t n = c[0];
        return submit(std::move(op), c10d::OpType::ALLTOALL_BASE, {output}, opts.timeout,
                      {[&](shoal_request_t *req) {
                          return shoal_ialltoall(ptr(input), ptr(output), n, e.dtype, comm_, req);
                      }});
    }
    std::vector<size_t> sc = split_counts(call, "input", input, input_splits, size_, e);
    std::vector<size_t> rc = split_counts(call, "output", output, output_splits, size_, e);
    append_counts(op->counts, sc);
    append_counts(op->counts, rc);
    const size_t *v = op->counts.data();
    const size_t n = (size_t)size_;
    return submit(std::move(op), c10d::OpType::ALLTOALL_BASE, {output}, opts.timeout,
                  {[&](shoal_request_t *req) {
                      return shoal_ialltoallv(ptr(input), v, v + n, ptr(output), v + 2 * n,
                                              v + 3 * n, e.dtype, comm_, req);
                  }});
}

c10::intrusive_ptr<Work> ProcessGroupShoal::alltoall(std::vector<at::Tensor> &outputs,
                                                     std::vector<at::Tensor> &inputs,
                                                     const c10d::AllToAllOptions &opts)
{
    static const char call[] = "alltoall";
    TORCH_CHECK((int)outputs.size() == size_ && (int)inputs.size() == size_, "shoal: ", call,
                ": takes lists of ", size_, " tensors (one per rank), not ", outputs.size(),
                " outputs and ", inputs.size(), " inputs");
    const at::ScalarType dtype = inputs[0].scalar_type();
    std::vector<size_t> sc, rc;
    Elem e = move_elem(dtype);
    for (int j = 0; j < size_; j++) {
        check_tensor(call, inputs[j]);
        check_tensor(call, outputs[j]);
        check_dtype(call, inputs[j], dtype);
        check_dtype(call, outputs[j], dtype);
        sc.push_back(count(inputs[j], e));
        rc.push_back(count(outputs[j], e));
    }
    at::Tensor send = flatten(inputs, dtype);
    int64_t total = 0;
    for (const at::Tensor &t : outputs)
        total += t.numel();
    at::Tensor recv = at::empty({total}, at::TensorOptions().dtype(dtype));
    auto op = new_op(call, {send, recv});
    append_counts(op->counts, sc);
    append_counts(op->counts, rc);
    op->finish = unflatten(recv, outputs);
    const size_t *v = op->counts.data();
    const size_t n = (size_t)size_;
    return submit(std::move(op), c10d::OpType::ALLTOALL, outputs, opts.timeout,
                  {[&](shoal_request_t *req) {
                      return shoal_ialltoallv(ptr(send), v, v + n, ptr(recv), v + 2 * n,
                                              v + 3 * n, e.dtype, comm_, req);
                  }});
}

c10::intrusive_ptr<Work> ProcessGroupShoal::send(std::vector<at::Tensor> &tensors, int dst,
                                                 int tag)
{
    static const char call[] = "send";
    const at::Tensor &t = one_tensor(call, tensors);
    check_tag(call, tag);
    check_root(call, dst, size_);
    Elem e = move_elem(t.scalar_type());
    auto op = new_op(call, tensors);
    return submit(std::move(op), c10d::OpType::SEND, tensors, c10d::kUnsetTimeout,
                  {[&](shoal_request_t *req) {
                      return shoal_isend(ptr(t), count(t, e), e.dtype, dst, comm_, req);
                  }});
}

c10::intrusive_ptr<Work> ProcessGroupShoal::recv(std::vector<at::Tensor> &tensors, int src,
                                                 int tag)
{
    static const char call[] = "recv";
    const at::Tensor &t = one_tensor(call, tensors);
    check_tag(call, tag);
    check_root(call, src, size_);
    Elem e = move_elem(t.scalar_type());
    auto op = new_op(call, tensors);
    return submit(std::move(op), c10d::OpType::RECV, tensors, c10d::kUnsetTimeout,
                  {[&](shoal_request_t *req) {
                      return shoal_irecv(ptr(t), count(t, e), e.dtype, src, comm_, req);
                  }});
}

c10::intrusive_ptr<Work> ProcessGroupShoal::recvAnysource(std::vector<at::Tensor> &tensors,
                                                          int tag)
{
    TORCH_CHECK(false, "shoal: recvAnysource (recv without a source rank) is not supported by "
                "the shoal backend: name the source rank");
}

c10::intrusive_ptr<Work> ProcessGroupShoal::barrier(const c10d::BarrierOptions &opts)
{
    static const char call[] = "barrier";
    auto op = new_op(call, {});
    return submit(std::move(op), c10d::OpType::BARRIER, {}, opts.timeout,
                  {[&](shoal_request_t *req) { return shoal_ibarrier(comm_, req); }});
}

void ProcessGroupShoal::monitoredBarrier(const c10d::BarrierOptions &opts, bool wait_all_ranks)
{
    TORCH_CHECK(false, "shoal: monitoredBarrier (monitored_barrier) is not supported by the "
                "shoal backend; barrier fails on every rank when one dies");
}

} // namespace shoal_c10d
