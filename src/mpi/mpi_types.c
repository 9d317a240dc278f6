/* MPI's predefined datatypes and ops as shoal's, for the door. */
#include "mpi_priv.h"

#include <string.h>

int shoal_mpi_is_ours(void)
{
    char text[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (PMPI_Get_library_version(text, &len) != MPI_SUCCESS)
        return 0;
    text[len < MPI_MAX_LIBRARY_VERSION_STRING ? len : MPI_MAX_LIBRARY_VERSION_STRING - 1] = '\0';
    return strstr(text, SHOAL_MPI_NAME) != NULL;
}

/* An integer type of the C implementation by its size and signedness
 * (shoal has no 16-bit integers: SHOAL_DTYPE_COUNT, none). */
static shoal_dtype_t int_of(size_t bytes, int is_signed)
{
    switch (bytes) {
    case 1: return is_signed ? SHOAL_INT8 : SHOAL_UINT8;
    case 4: return is_signed ? SHOAL_INT32 : SHOAL_UINT32;
    case 8: return is_signed ? SHOAL_INT64 : SHOAL_UINT64;
    default: return SHOAL_DTYPE_COUNT;
    }
}

int shoal_mpi_dtype(MPI_Datatype t, shoal_dtype_t *dt_p)
{
    struct {
        MPI_Datatype mpi;
        shoal_dtype_t dt;
    } const map[] = {
        {MPI_INT8_T, SHOAL_INT8},
        {MPI_UINT8_T, SHOAL_UINT8},
        {MPI_INT32_T, SHOAL_INT32},
        {MPI_UINT32_T, SHOAL_UINT32},
        {MPI_INT64_T, SHOAL_INT64},
        {MPI_UINT64_T, SHOAL_UINT64},
        {MPI_SIGNED_CHAR, SHOAL_INT8},
        {MPI_UNSIGNED_CHAR, SHOAL_UINT8},
        {MPI_SHORT, int_of(sizeof(short), 1)},
        {MPI_UNSIGNED_SHORT, int_of(sizeof(short), 0)},
        {MPI_INT, int_of(sizeof(int), 1)},
        {MPI_UNSIGNED, int_of(sizeof(int), 0)},
        {MPI_LONG, int_of(sizeof(long), 1)},
        {MPI_UNSIGNED_LONG, int_of(sizeof(long), 0)},
        {MPI_LONG_LONG, int_of(sizeof(long long), 1)},
        {MPI_UNSIGNED_LONG_LONG, int_of(sizeof(long long), 0)},
        {MPI_FLOAT, SHOAL_FLOAT32},
        {MPI_DOUBLE, SHOAL_FLOAT64},
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        if (map[i].mpi == t) {
            *dt_p = map[i].dt;
            return map[i].dt != SHOAL_DTYPE_COUNT;
        }
    }
    return 0;
}

int shoal_mpi_op(MPI_Op op, shoal_dtype_t dt, shoal_op_t *op_p)
{
    (void)dt;
    if (op == MPI_SUM)
        *op_p = SHOAL_SUM;
    else if (op == MPI_PROD)
        *op_p = SHOAL_PROD;
    else if (op == MPI_MIN)
        *op_p = SHOAL_MIN;
    else if (op == MPI_MAX)
        *op_p = SHOAL_MAX;
    else
        return 0;
    return 1;
}
