/* Element sizes and the names that nccl-tests prints for types and ops. */
#include "dtype.h"
#include "log.h"

static const size_t dtype_bytes[SHOAL_DTYPE_COUNT] = {
    [SHOAL_INT8] = 1,     [SHOAL_UINT8] = 1,    [SHOAL_INT32] = 4,
    [SHOAL_UINT32] = 4,   [SHOAL_INT64] = 8,    [SHOAL_UINT64] = 8,
    [SHOAL_FLOAT16] = 2,  [SHOAL_FLOAT32] = 4,  [SHOAL_FLOAT64] = 8,
    [SHOAL_BFLOAT16] = 2, [SHOAL_FP8_E4M3] = 1, [SHOAL_FP8_E5M2] = 1,
};

static const char *const dtype_names[SHOAL_DTYPE_COUNT] = {
    [SHOAL_INT8] = "int8",         [SHOAL_UINT8] = "uint8",
    [SHOAL_INT32] = "int32",       [SHOAL_UINT32] = "uint32",
    [SHOAL_INT64] = "int64",       [SHOAL_UINT64] = "uint64",
    [SHOAL_FLOAT16] = "half",      [SHOAL_FLOAT32] = "float",
    [SHOAL_FLOAT64] = "double",    [SHOAL_BFLOAT16] = "bfloat16",
    [SHOAL_FP8_E4M3] = "f8e4m3",   [SHOAL_FP8_E5M2] = "f8e5m2",
};

static const char *const op_names[SHOAL_OP_COUNT] = {
    [SHOAL_SUM] = "sum", [SHOAL_PROD] = "prod", [SHOAL_MAX] = "max",
    [SHOAL_MIN] = "min", [SHOAL_AVG] = "avg",
};

/* The enums may hold any int a caller casts in: compare as unsigned so that
 * negative values are out of range too. */
size_t shoal_dtype_bytes(shoal_dtype_t dtype)
{
    if ((unsigned)dtype >= SHOAL_DTYPE_COUNT)
        return 0;
    return dtype_bytes[dtype];
}

const char *shoal_dtype_name(shoal_dtype_t dtype)
{
    if ((unsigned)dtype >= SHOAL_DTYPE_COUNT)
        return "?";
    return dtype_names[dtype];
}

static const char *const bitop_names[SHOAL_BITOP_END - SHOAL_BAND] = {
    [SHOAL_BAND - SHOAL_BAND] = "band", [SHOAL_BOR - SHOAL_BAND] = "bor",
    [SHOAL_BXOR - SHOAL_BAND] = "bxor", [SHOAL_LAND - SHOAL_BAND] = "land",
    [SHOAL_LOR - SHOAL_BAND] = "lor",   [SHOAL_LXOR - SHOAL_BAND] = "lxor",
};

const char *shoal_op_name(shoal_op_t op)
{
    if (shoal_op_is_bitop(op))
        return bitop_names[op - SHOAL_BAND];
    if ((unsigned)op >= SHOAL_OP_COUNT)
        return "?";
    return op_names[op];
}

shoal_status_t shoal_dtype_size(shoal_dtype_t dtype, size_t *size_p)
{
    size_t bytes = shoal_dtype_bytes(dtype);
    if (bytes == 0) {
        shoal_error(INIT, "shoal_dtype_size: unknown dtype %d", (int)dtype);
        return SHOAL_ERR_INVALID_ARG;
    }
    if (size_p == NULL) {
        shoal_error(INIT, "shoal_dtype_size: NULL size_p");
        return SHOAL_ERR_INVALID_ARG;
    }
    *size_p = bytes;
    return SHOAL_OK;
}

void shoal_dtype_set_f64(void *buf, size_t i, shoal_dtype_t dtype, double v)
{
    switch (dtype) {
    case SHOAL_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case SHOAL_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case SHOAL_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case SHOAL_UINT32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    case SHOAL_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case SHOAL_UINT64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
    case SHOAL_FLOAT16: ((uint16_t *)buf)[i] = shoal_f32_to_f16((float)v); break;
    case SHOAL_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case SHOAL_FLOAT64: ((double *)buf)[i] = v; break;
    case SHOAL_BFLOAT16: ((uint16_t *)buf)[i] = shoal_f32_to_bf16((float)v); break;
    case SHOAL_FP8_E4M3: ((uint8_t *)buf)[i] = shoal_f32_to_e4m3((float)v); break;
    case SHOAL_FP8_E5M2: ((uint8_t *)buf)[i] = shoal_f32_to_e5m2((float)v); break;
    default: break;
    }
}
