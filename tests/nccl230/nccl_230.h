/* NCCL 2.30's additions to nccl.h, written down from its public header
 * for test_nccl_230.c (the toolkit here ships 2.28.9): the prototypes,
 * redeclared after shoal's nccl.h so that any difference is a
 * "conflicting types" error, and the values and layouts, checked by
 * static assertions. Only what the door serves so far is listed; each
 * 2.30 function joins when it lands. */
#ifndef SHOAL_TEST_NCCL_230_H
#define SHOAL_TEST_NCCL_230_H

#include <stddef.h>
#include <stdint.h>

ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId *uniqueId);
ncclResult_t pncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId *uniqueId);
ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank,
                          ncclComm_t *newcomm, ncclConfig_t *config);
ncclResult_t pncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank,
                           ncclComm_t *newcomm, ncclConfig_t *config);
ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void **outUserPtr);
ncclResult_t pncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void **outUserPtr);

ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t pncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t ncclCommResume(ncclComm_t comm);
ncclResult_t pncclCommResume(ncclComm_t comm);
ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value);
ncclResult_t pncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value);
_Static_assert(NCCL_SUSPEND_MEM == 0x01, "NCCL_SUSPEND_MEM");
_Static_assert(ncclStatGpuMemSuspend == 0 && ncclStatGpuMemSuspended == 1 &&
                   ncclStatGpuMemPersist == 2 && ncclStatGpuMemTotal == 3,
               "ncclCommMemStat_t");

ncclResult_t ncclPutSignal(const void *localbuff, size_t count, ncclDataType_t datatype,
                           int peer, ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx,
                           int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclPutSignal(const void *localbuff, size_t count, ncclDataType_t datatype,
                            int peer, ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx,
                            int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                        cudaStream_t stream);
ncclResult_t pncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                         cudaStream_t stream);
ncclResult_t ncclWaitSignal(int nDesc, ncclWaitSignalDesc_t *signalDescs, ncclComm_t comm,
                            cudaStream_t stream);
ncclResult_t pncclWaitSignal(int nDesc, ncclWaitSignalDesc_t *signalDescs, ncclComm_t comm,
                             cudaStream_t stream);
_Static_assert(sizeof(ncclWaitSignalDesc_t) == 4 * sizeof(int) &&
                   offsetof(ncclWaitSignalDesc_t, opCnt) == 0 &&
                   offsetof(ncclWaitSignalDesc_t, peer) == sizeof(int) &&
                   offsetof(ncclWaitSignalDesc_t, sigIdx) == 2 * sizeof(int) &&
                   offsetof(ncclWaitSignalDesc_t, ctx) == 3 * sizeof(int),
               "ncclWaitSignalDesc_t");

typedef struct ncclParamHandle *ncclParamHandle_t;
ncclResult_t ncclParamBind(ncclParamHandle_t *out, const char *key);
ncclResult_t pncclParamBind(ncclParamHandle_t *out, const char *key);
ncclResult_t ncclParamGetI8(ncclParamHandle_t h, int8_t *out);
ncclResult_t pncclParamGetI8(ncclParamHandle_t h, int8_t *out);
ncclResult_t ncclParamGetI16(ncclParamHandle_t h, int16_t *out);
ncclResult_t pncclParamGetI16(ncclParamHandle_t h, int16_t *out);
ncclResult_t ncclParamGetI32(ncclParamHandle_t h, int32_t *out);
ncclResult_t pncclParamGetI32(ncclParamHandle_t h, int32_t *out);
ncclResult_t ncclParamGetI64(ncclParamHandle_t h, int64_t *out);
ncclResult_t pncclParamGetI64(ncclParamHandle_t h, int64_t *out);
ncclResult_t ncclParamGetU8(ncclParamHandle_t h, uint8_t *out);
ncclResult_t pncclParamGetU8(ncclParamHandle_t h, uint8_t *out);
ncclResult_t ncclParamGetU16(ncclParamHandle_t h, uint16_t *out);
ncclResult_t pncclParamGetU16(ncclParamHandle_t h, uint16_t *out);
ncclResult_t ncclParamGetU32(ncclParamHandle_t h, uint32_t *out);
ncclResult_t pncclParamGetU32(ncclParamHandle_t h, uint32_t *out);
ncclResult_t ncclParamGetU64(ncclParamHandle_t h, uint64_t *out);
ncclResult_t pncclParamGetU64(ncclParamHandle_t h, uint64_t *out);
ncclResult_t ncclParamGetStr(ncclParamHandle_t h, const char **out);
ncclResult_t pncclParamGetStr(ncclParamHandle_t h, const char **out);
ncclResult_t ncclParamGet(ncclParamHandle_t h, void *out, int maxLen, int *len);
ncclResult_t pncclParamGet(ncclParamHandle_t h, void *out, int maxLen, int *len);
ncclResult_t ncclParamGetParameter(const char *key, const char **value, int *valueLen);
ncclResult_t pncclParamGetParameter(const char *key, const char **value, int *valueLen);
ncclResult_t ncclParamGetAllParameterKeys(const char ***table, int *tableLen);
ncclResult_t pncclParamGetAllParameterKeys(const char ***table, int *tableLen);
void ncclParamDumpAll(void);
void pncclParamDumpAll(void);

_Static_assert(NCCL_MAJOR == 2 && NCCL_MINOR == 30 && NCCL_PATCH == 7, "NCCL 2.30.7");
_Static_assert(NCCL_VERSION_CODE == 23007, "NCCL_VERSION_CODE");
_Static_assert(NCCL_VERSION(2, 30, 7) == 23007, "NCCL_VERSION");
_Static_assert(ncclTimeout == 8 && ncclNumResults == 9, "ncclTimeout, ncclNumResults");
_Static_assert(NCCL_WIN_STRICT_ORDERING == 0x02, "NCCL_WIN_STRICT_ORDERING");
_Static_assert(NCCL_API_MAGIC == 0xcafebeef, "NCCL_API_MAGIC");

/* ncclConfig_v23000: 2.28's fields, then four ints. */
_Static_assert(__builtin_types_compatible_p(ncclConfig_t, struct ncclConfig_v23000),
               "ncclConfig_t is struct ncclConfig_v23000");
_Static_assert(sizeof(ncclConfig_t) == 96, "sizeof(ncclConfig_t)");
_Static_assert(offsetof(ncclConfig_t, nvlinkCentricSched) == 76, "nvlinkCentricSched");
_Static_assert(offsetof(ncclConfig_t, graphUsageMode) == 80, "graphUsageMode");
_Static_assert(offsetof(ncclConfig_t, numRmaCtx) == 84, "numRmaCtx");
_Static_assert(offsetof(ncclConfig_t, maxP2pPeers) == 88, "maxP2pPeers");
_Static_assert(offsetof(ncclConfig_t, graphStreamOrdering) == 92, "graphStreamOrdering");

/* 2.28.9's config ends where 2.30's new fields start. */
#define NCCL_228_CONFIG_SIZE 80

#endif
