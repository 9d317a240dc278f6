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

const char *shoal_op_name(shoal_op_t op)
{
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
