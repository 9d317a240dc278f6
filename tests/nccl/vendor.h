/* Conformance test of an NCCL drop-in, built against the vendor's nccl.h and
 * libnccl.so.2 and run with the drop-in preloaded. Nothing here includes a
 * shoal header: the program must be one that NCCL's own users could write.
 *
 * vendor_ref.c  scalar reference: dtype conversions, inputs, expected results
 * vendor_coll.c every collective x dtype x op x size x in/out of place
 * vendor_api.c  communicators, groups, ops, registration, errors
 * vendor_compress.c  all-reduces under the drop-in's SHOAL_COMPRESS setting
 * vendor_compress_colls.c  all-gathers and reduce-scatters under its
 *               SHOAL_COMPRESS_ALLGATHER and SHOAL_COMPRESS_REDUCESCATTER
 * vendor_devapi.c  the device API's host functions
 * vendor_test.c symbol check, fork harness, single-process cases, main */
#ifndef NCCL_VENDOR_TEST_H
#define NCCL_VENDOR_TEST_H

/* The vendor declares ncclGroupStart() and friends without (void); that is
 * theirs to fix, so the project's -Wstrict-prototypes stays on for ours. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Every call uses host buffers and the NULL stream. */
#define VT_STREAM ((cudaStream_t)0)

/* The reference's own name for pre-multiply-sum, next to ncclSum..ncclAvg. */
#define VT_OP_PREMUL 5
#define VT_NOPS 6

/* Bytes after every receive region that must come back untouched. */
#define VT_GUARD 64
/* Fill byte of receive buffers before a call. */
#define VT_SENTINEL 0xA7

/* ---- reference (vendor_ref.c) ------------------------------------------ */

typedef enum { VT_SINT, VT_UINT, VT_FLOAT } vt_kind_t;

/* One element, wide enough for every dtype: integers in i/u, floats in f. */
typedef union {
    int64_t i;
    uint64_t u;
    double f;
} vt_val_t;

size_t vt_size(ncclDataType_t dt);
vt_kind_t vt_kind(ncclDataType_t dt);
const char *vt_dtype_name(ncclDataType_t dt);
const char *vt_op_name(int op);

/* Minifloat conversions with round-to-nearest-even; no NaN or Inf inputs. */
uint16_t vt_to_half(double v);
double vt_from_half(uint16_t h);
uint16_t vt_to_bf16(double v);
double vt_from_bf16(uint16_t h);
uint8_t vt_to_e4m3(double v);
double vt_from_e4m3(uint8_t h);
uint8_t vt_to_e5m2(double v);
double vt_from_e5m2(uint8_t h);

/* Element i of buf as dtype dt, and back. */
void vt_store(ncclDataType_t dt, void *buf, size_t i, vt_val_t v);
vt_val_t vt_load(ncclDataType_t dt, const void *buf, size_t i);
/* Text of a value for failure messages. */
void vt_format(ncclDataType_t dt, vt_val_t v, char *text, size_t len);

/* Input element g of rank for a reduction with op over nranks ranks. The
 * values are chosen so that every partial result, in any order, is exact
 * in dt (so the expected result does not depend on the algorithm), except
 * float averages, which are exact when summed first and within one ulp when
 * pre-multiplied by 1/nranks as NCCL does. */
vt_val_t vt_input(ncclDataType_t dt, int op, int rank, int nranks, size_t g, uint32_t salt);
/* Rank's pre-multiply-sum scalar for dt. */
vt_val_t vt_scalar(ncclDataType_t dt, int rank);
/* Expected element g of op reduced over ranks 0..nranks-1. */
vt_val_t vt_expected(ncclDataType_t dt, int op, int nranks, size_t g, uint32_t salt);
/* Whether got matches want (exact; float Avg within one ulp of dt). */
bool vt_match(ncclDataType_t dt, int op, vt_val_t got, vt_val_t want);

/* buf[k] = vt_input(dt, op, rank, nranks, base + k, salt) for k < count. */
void vt_fill_input(void *buf, ncclDataType_t dt, int op, int rank, int nranks, size_t base,
                   size_t count, uint32_t salt);
/* Bytes of source src for copy collectives: any bit pattern, position
 * dependent (byte offset off of src's logical send vector). */
void vt_fill_bytes(void *buf, size_t off, size_t len, int src, uint32_t salt);
uint8_t vt_byte(int src, size_t off, uint32_t salt);

uint32_t vt_mix(uint32_t x);

/* ---- per-process reporting (vendor_test.c) ------------------------------ */

/* Name of this process in failure lines ("rank 3", "comm 2 of 4"). */
void vt_set_who(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Report one failed check as "# rank R: <what>" on stderr and count it. */
void vt_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int vt_failures(void);

/* Whether addr lies in the file lib; says where it lies otherwise. */
bool vt_lives_in(const char *name, void *addr, const char *lib);

/* Check a return code; reports "<call>: got <code> expected <code>". */
bool vt_rc(const char *what, ncclResult_t got, ncclResult_t want);
/* Either of two acceptable codes (ncclSuccess or ncclInProgress). */
bool vt_rc2(const char *what, ncclResult_t got, ncclResult_t want1, ncclResult_t want2);
#define VT_RC(call, want) vt_rc(#call, (call), (want))

/* Compare count elements of got with the expected reduction, element g of
 * the logical vector for got[k] being base + k. */
bool vt_check_reduced(const char *what, const void *got, ncclDataType_t dt, int op, int nranks,
                      size_t base, size_t count, uint32_t salt);
/* Compare len bytes with vt_byte(src, off + k, salt). */
bool vt_check_bytes(const char *what, const void *got, ncclDataType_t dt, size_t off, size_t len,
                    int src, uint32_t salt);
/* buf[from..to) still VT_SENTINEL. */
bool vt_check_sentinel(const char *what, const void *buf, size_t from, size_t to);

/* Allocate len + VT_GUARD bytes filled with VT_SENTINEL; exits the rank on
 * failure (the machine is out of memory, nothing to test). */
void *vt_alloc(size_t len);

/* Poll ncclCommGetAsyncError until it is no longer ncclInProgress or a
 * deadline passes; returns the last state. */
ncclResult_t vt_wait_comm(ncclComm_t comm, const char *what);

/* ---- rank bodies --------------------------------------------------------- */

/* Unique ids the parent creates before forking, one per communicator. */
enum {
    VT_ID_MAIN,
    VT_ID_CONFIG,
    VT_ID_OLDCFG,
    VT_ID_SCAL1,
    VT_ID_SCAL2A,
    VT_ID_SCAL2B,
    VT_ID_NONBLOCK,
    VT_ID_SHRINK,
    VT_ID_REVOKE,
    VT_NIDS
};

typedef struct {
    ncclUniqueId id[VT_NIDS];
} vt_ids_t;

/* Each returns 0 when every check passed. */
int vt_coll_rank(int rank, int nranks, const vt_ids_t *ids);
int vt_comm_rank(int rank, int nranks, const vt_ids_t *ids);
int vt_usage_rank(int rank, int nranks, const vt_ids_t *ids);
int vt_input_rank(int rank, int nranks, const vt_ids_t *ids);
int vt_shrink_abort_rank(int rank, int nranks, const vt_ids_t *ids);
int vt_death_rank(int rank, int nranks, const vt_ids_t *ids);
/* vendor_compress.c: all-reduces as SHOAL_COMPRESS says. */
int vt_compress_rank(int rank, int nranks, const vt_ids_t *ids);
/* vendor_compress_colls.c: all-gathers and reduce-scatters as
 * SHOAL_COMPRESS_ALLGATHER and SHOAL_COMPRESS_REDUCESCATTER say. */
int vt_compress_colls_rank(int rank, int nranks, const vt_ids_t *ids);
/* vendor_devapi.c: the device API's host functions, the ranks on one host
 * or on two; the number of them (and ncclResetDebugInitInternal) that do
 * not lie in lib. */
int vt_devapi_rank(int rank, int nranks, const vt_ids_t *ids);
int vt_devapi_hosts_rank(int rank, int nranks, const vt_ids_t *ids);
/* The two-host rank runs in the program started afresh: argv[1] is this,
 * then the rank and the rank count; main hands such a run to
 * vt_devapi_exec_main. */
#define VT_DEVAPI_EXEC "--devapi-hosts-rank"
int vt_devapi_exec_main(int argc, char **argv);
int vt_devapi_check_symbols(const char *lib);

/* All-reduce a small int32 vector on comm and check it: the "comm still
 * works" probe after every error. tag makes the inputs distinct. */
bool vt_probe_allreduce(ncclComm_t comm, int rank, int nranks, const char *what, uint32_t tag);
/* Wait, up to a minute, until every rank of the case has reached the point
 * named tag (a word): each leaves a mark in /tmp and looks for the
 * others'; the parent removes the marks when the case ends. For cases
 * whose next step on one rank (a revoke, a death) would fail a collective
 * another rank is still finishing. */
void vt_ranks_meet(const char *tag, int rank, int nranks);

#endif
