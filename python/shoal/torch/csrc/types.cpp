/* Tensors, element types and reduce ops in shoal's terms (see
 * shoal_c10d.hpp). */
#include "shoal_c10d.hpp"

namespace shoal_c10d {

void check_tensor(const char *call, const at::Tensor &t)
{
    TORCH_CHECK(t.defined(), "shoal: ", call, ": a tensor is undefined");
    TORCH_CHECK(t.device().is_cpu(), "shoal: ", call, ": a tensor is on ", t.device(),
                "; the shoal backend takes CPU tensors only");
    TORCH_CHECK(t.layout() == c10::kStrided, "shoal: ", call, ": a tensor has layout ",
                t.layout(), "; the shoal backend takes dense (strided) tensors only");
    TORCH_CHECK(t.is_contiguous(), "shoal: ", call,
                ": a tensor is not contiguous; the shoal backend takes contiguous tensors "
                "only (call .contiguous() first)");
}

const at::Tensor &one_tensor(const char *call, const std::vector<at::Tensor> &tensors)
{
    TORCH_CHECK(tensors.size() == 1, "shoal: ", call, ": takes one tensor per call, not ",
                tensors.size());
    check_tensor(call, tensors[0]);
    return tensors[0];
}

/* The types torch and shoal share; bool travels as uint8. */
static bool shared_dtype(at::ScalarType t, shoal_dtype_t *dtype_p)
{
    switch (t) {
    case at::kChar: *dtype_p = SHOAL_INT8; return true;
    case at::kByte: *dtype_p = SHOAL_UINT8; return true;
    case at::kBool: *dtype_p = SHOAL_UINT8; return true;
    case at::kInt: *dtype_p = SHOAL_INT32; return true;
    case at::kLong: *dtype_p = SHOAL_INT64; return true;
    case at::kHalf: *dtype_p = SHOAL_FLOAT16; return true;
    case at::kBFloat16: *dtype_p = SHOAL_BFLOAT16; return true;
    case at::kFloat: *dtype_p = SHOAL_FLOAT32; return true;
    case at::kDouble: *dtype_p = SHOAL_FLOAT64; return true;
    default: return false;
    }
}

shoal_dtype_t reduce_dtype(const char *call, at::ScalarType t)
{
    shoal_dtype_t d;
    TORCH_CHECK(shared_dtype(t, &d), "shoal: ", call, ": dtype ", t,
                " has no reduction in shoal (it reduces int8, uint8, int32, int64, float16, "
                "bfloat16, float32, float64 and bool)");
    return d;
}

Elem move_elem(at::ScalarType t)
{
    shoal_dtype_t d;
    if (shared_dtype(t, &d))
        return {d, 1};
    /* Moving needs no arithmetic: another type moves as its bytes. */
    return {SHOAL_UINT8, c10::elementSize(t)};
}

static const char *op_name(c10d::ReduceOp::RedOpType op)
{
    switch (op) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNUSED";
    }
}

Reduction reduction(const char *call, const c10d::ReduceOp &rop, at::ScalarType t)
{
    Reduction r{reduce_dtype(call, t), SHOAL_SUM, false, at::Tensor()};
    const bool is_bool = t == at::kBool;
    const bool is_int = at::isIntegralType(t, /*includeBool=*/true);
    const char *name = op_name(rop.op_);
    switch (rop.op_) {
    /* On bool, a sum is a logical or and a product a logical and: the
     * result stays 0 or 1, as a bool must. */
    case c10d::ReduceOp::SUM: r.op = is_bool ? SHOAL_MAX : SHOAL_SUM; break;
    case c10d::ReduceOp::PRODUCT: r.op = is_bool ? SHOAL_MIN : SHOAL_PROD; break;
    case c10d::ReduceOp::MIN: r.op = SHOAL_MIN; break;
    case c10d::ReduceOp::MAX: r.op = SHOAL_MAX; break;
    case c10d::ReduceOp::AVG:
        TORCH_CHECK(!is_bool, "shoal: ", call, ": ReduceOp.AVG of bool tensors is not defined");
        r.op = SHOAL_AVG;
        break;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
        TORCH_CHECK(is_int, "shoal: ", call, ": ReduceOp.", name,
                    " takes integer or bool tensors, not ", t);
        r.op = rop.op_ == c10d::ReduceOp::BAND  ? SHOAL_BAND
               : rop.op_ == c10d::ReduceOp::BOR ? SHOAL_BOR
                                                : SHOAL_BXOR;
        break;
    case c10d::ReduceOp::PREMUL_SUM: {
        TORCH_CHECK(!is_bool, "shoal: ", call, ": ReduceOp.PREMUL_SUM of bool tensors is not "
                    "defined");
        auto *sup = dynamic_cast<c10d::NCCLPreMulSumSupplement *>(rop.supplement_.get());
        TORCH_CHECK(sup, "shoal: ", call, ": ReduceOp.PREMUL_SUM without its factor");
        /* A list of tensors holds the factor once per device: one here. */
        TORCH_CHECK(sup->tensor_factors.size() <= 1, "shoal: ", call,
                    ": ReduceOp.PREMUL_SUM with ", sup->tensor_factors.size(),
                    " factor tensors (one per device); CPU tensors take one");
        at::Tensor f = sup->tensor_factors.empty()
                           ? at::scalar_tensor(sup->double_factor, at::kDouble)
                           : sup->tensor_factors[0];
        TORCH_CHECK(f.numel() == 1, "shoal: ", call,
                    ": ReduceOp.PREMUL_SUM's factor must be one value, not ", f.numel());
        r.premul = true;
        r.factor = f.to(at::kCPU).to(t).contiguous();
        break;
    }
    default:
        TORCH_CHECK(false, "shoal: ", call, ": ReduceOp.", name,
                    " is not supported by the shoal backend");
    }
    return r;
}

} // namespace shoal_c10d
