/* libibverbs, loaded at run time: the one file that names its symbols
 * (ib_verbs.c), so that libshoal needs no libibverbs to load and run, and
 * the ib transport says why it is unavailable where rdma-core is absent.
 * Built only with rdma-core's headers (SHOAL_HAVE_IBVERBS). */
#ifndef SHOAL_IB_VERBS_H
#define SHOAL_IB_VERBS_H

#if SHOAL_HAVE_IBVERBS
#include <infiniband/verbs.h>

/* The entry points shoal calls. The rest of the verbs API shoal uses
 * (posting work requests, polling completion queues) is inline in the
 * header and goes through the device's own function table. */
typedef struct {
    struct ibv_device **(*get_device_list)(int *num);
    void (*free_device_list)(struct ibv_device **list);
    const char *(*get_device_name)(struct ibv_device *dev);
    struct ibv_context *(*open_device)(struct ibv_device *dev);
    int (*close_device)(struct ibv_context *ctx);
    int (*query_device)(struct ibv_context *ctx, struct ibv_device_attr *attr);
    /* The exported symbol, for providers without the extended call. */
    int (*query_port)(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *attr);
    int (*query_gid)(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *ctx);
    int (*dealloc_pd)(struct ibv_pd *pd);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access);
    int (*dereg_mr)(struct ibv_mr *mr);
    struct ibv_cq *(*create_cq)(struct ibv_context *ctx, int cqe, void *cq_context,
                                struct ibv_comp_channel *channel, int comp_vector);
    int (*destroy_cq)(struct ibv_cq *cq);
    struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
    int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
    int (*destroy_qp)(struct ibv_qp *qp);
    int (*get_async_event)(struct ibv_context *ctx, struct ibv_async_event *event);
    void (*ack_async_event)(struct ibv_async_event *event);
    const char *(*event_type_str)(enum ibv_event_type type);
    const char *(*wc_status_str)(enum ibv_wc_status status);
    struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *ctx);
    int (*destroy_comp_channel)(struct ibv_comp_channel *channel);
    int (*get_cq_event)(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context);
    void (*ack_cq_events)(struct ibv_cq *cq, unsigned int nevents);
} shoal_ibv_t;

/* The table, loaded once per process (thread-safe). NULL when
 * libibverbs.so.1 cannot be loaded or lacks an entry point; then *why_p
 * (when not NULL) says why, for as long as the process lives. */
const shoal_ibv_t *shoal_ibv(const char **why_p);

/* ibv_query_port as the header's inline wrapper does it: the provider's
 * extended call where it has one, else the exported one. */
int shoal_ibv_query_port(const shoal_ibv_t *v, struct ibv_context *ctx, uint8_t port,
                         struct ibv_port_attr *attr);
#endif

#endif
