/* MPI's predefined datatypes and ops as shoal's, for the door. */
#include "mpi_priv.h"

#include <limits.h>
#include <stdint.h>
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
 * (shoal has no 16-bit integers: SHOAL_DTYPE_COUNT, none); a constant,
 * so that the table below is built once, by the loader. */
#define INT_OF(bytes, is_signed)                                                           \
    ((bytes) == 1   ? ((is_signed) ? SHOAL_INT8 : SHOAL_UINT8)                            \
     : (bytes) == 4 ? ((is_signed) ? SHOAL_INT32 : SHOAL_UINT32)                          \
     : (bytes) == 8 ? ((is_signed) ? SHOAL_INT64 : SHOAL_UINT64)                          \
                    : SHOAL_DTYPE_COUNT)

/* What an MPI type may be reduced with: MPI's own groups (MPI 4.0 §6.9.2). */
enum { ARITH = 1, LOGIC = 2, BITS = 4 };

typedef struct {
    MPI_Datatype mpi;
    shoal_dtype_t dt;
    int ops;
} type_map_t;

/* Every call looks its type up here: the handles are constants (MPICH's
 * ints, Open MPI's addresses of its predefined objects), so the table is
 * static and a lookup only scans it. */
static const type_map_t map[] = {
    /* The most common first: a lookup scans in order. */
    {MPI_FLOAT, SHOAL_FLOAT32, ARITH},
    {MPI_DOUBLE, SHOAL_FLOAT64, ARITH},
    {MPI_INT, INT_OF(sizeof(int), 1), ARITH | LOGIC | BITS},
    {MPI_INT8_T, SHOAL_INT8, ARITH | LOGIC | BITS},
    {MPI_UINT8_T, SHOAL_UINT8, ARITH | LOGIC | BITS},
    {MPI_INT32_T, SHOAL_INT32, ARITH | LOGIC | BITS},
    {MPI_UINT32_T, SHOAL_UINT32, ARITH | LOGIC | BITS},
    {MPI_INT64_T, SHOAL_INT64, ARITH | LOGIC | BITS},
    {MPI_UINT64_T, SHOAL_UINT64, ARITH | LOGIC | BITS},
    {MPI_SIGNED_CHAR, SHOAL_INT8, ARITH | LOGIC | BITS},
    {MPI_UNSIGNED_CHAR, SHOAL_UINT8, ARITH | LOGIC | BITS},
    {MPI_CHAR, INT_OF(1, CHAR_MIN < 0), ARITH | LOGIC | BITS},
    {MPI_SHORT, INT_OF(sizeof(short), 1), ARITH | LOGIC | BITS},
    {MPI_UNSIGNED_SHORT, INT_OF(sizeof(short), 0), ARITH | LOGIC | BITS},
    {MPI_UNSIGNED, INT_OF(sizeof(int), 0), ARITH | LOGIC | BITS},
    {MPI_LONG, INT_OF(sizeof(long), 1), ARITH | LOGIC | BITS},
    {MPI_UNSIGNED_LONG, INT_OF(sizeof(long), 0), ARITH | LOGIC | BITS},
    {MPI_LONG_LONG, INT_OF(sizeof(long long), 1), ARITH | LOGIC | BITS},
    {MPI_UNSIGNED_LONG_LONG, INT_OF(sizeof(long long), 0), ARITH | LOGIC | BITS},
    {MPI_C_BOOL, INT_OF(sizeof(_Bool), 0), LOGIC},
    /* Fortran's, which its bindings pass to the C entry points. */
    {MPI_INTEGER, INT_OF(sizeof(MPI_Fint), 1), ARITH | BITS},
    {MPI_REAL, SHOAL_FLOAT32, ARITH},
    {MPI_DOUBLE_PRECISION, SHOAL_FLOAT64, ARITH},
    {MPI_BYTE, SHOAL_UINT8, BITS},
};

static int find(MPI_Datatype t, type_map_t *m_p)
{
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        if (map[i].mpi == t && t != MPI_DATATYPE_NULL && map[i].dt != SHOAL_DTYPE_COUNT) {
            *m_p = map[i];
            return 1;
        }
    }
    return 0;
}

int shoal_mpi_reduction(MPI_Datatype t, MPI_Op op, shoal_dtype_t *dt_p, shoal_op_t *op_p)
{
    static const struct {
        MPI_Op mpi;
        shoal_op_t op;
        int group;
    } ops[] = {
        {MPI_SUM, SHOAL_SUM, ARITH},   {MPI_PROD, SHOAL_PROD, ARITH},
        {MPI_MIN, SHOAL_MIN, ARITH},   {MPI_MAX, SHOAL_MAX, ARITH},
        {MPI_LAND, SHOAL_LAND, LOGIC}, {MPI_LOR, SHOAL_LOR, LOGIC},
        {MPI_LXOR, SHOAL_LXOR, LOGIC}, {MPI_BAND, SHOAL_BAND, BITS},
        {MPI_BOR, SHOAL_BOR, BITS},    {MPI_BXOR, SHOAL_BXOR, BITS},
    };
    type_map_t m;
    if (!find(t, &m))
        return 0;
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        if (ops[i].mpi == op) {
            *dt_p = m.dt;
            *op_p = ops[i].op;
            return (m.ops & ops[i].group) != 0;
        }
    }
    return 0;
}

/* A named type (not derived) whose extent is its size, from 0: every
 * element is a run of bytes next to the one before. */
int shoal_mpi_bytes(MPI_Datatype t, size_t *es_p)
{
    type_map_t m;
    if (find(t, &m)) /* the common ones, without asking MPI */
        return shoal_dtype_size(m.dt, es_p) == SHOAL_OK;
    int ni, na, nd, combiner, size;
    MPI_Aint lb, extent;
    if (t == MPI_DATATYPE_NULL ||
        PMPI_Type_get_envelope(t, &ni, &na, &nd, &combiner) != MPI_SUCCESS ||
        combiner != MPI_COMBINER_NAMED || PMPI_Type_size(t, &size) != MPI_SUCCESS ||
        PMPI_Type_get_extent(t, &lb, &extent) != MPI_SUCCESS || size <= 0 || lb != 0 ||
        extent != size)
        return 0;
    *es_p = (size_t)size;
    return 1;
}
