/* libibverbs through dlopen (ib_verbs.h). */
#include "ib_verbs.h"

#if SHOAL_HAVE_IBVERBS
#include "base/config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static pthread_once_t ibv_once = PTHREAD_ONCE_INIT;
static shoal_ibv_t ibv_table;
static const shoal_ibv_t *ibv_loaded;
static char ibv_why[512];

/* dlsym's result into a function pointer: the two are of one size on
 * every platform with dlsym, which is what POSIX asks for. */
#define IBV_SYM(field, name)                                                  \
    do {                                                                      \
        void *sym_ = dlsym(lib, name);                                        \
        if (!sym_) {                                                          \
            snprintf(ibv_why, sizeof(ibv_why), "libibverbs.so.1 has no %s", name); \
            goto missing;                                                     \
        }                                                                     \
        memcpy(&ibv_table.field, &sym_, sizeof(sym_));                        \
    } while (0)

static void ibv_load(void)
{
    const char *name = shoal_config_get()->ib.test_lib;
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(ibv_why, sizeof(ibv_why), "cannot load %s (rdma-core): %s", name,
                 e ? e : "unknown error");
        return;
    }
    IBV_SYM(get_device_list, "ibv_get_device_list");
    IBV_SYM(free_device_list, "ibv_free_device_list");
    IBV_SYM(get_device_name, "ibv_get_device_name");
    IBV_SYM(open_device, "ibv_open_device");
    IBV_SYM(close_device, "ibv_close_device");
    IBV_SYM(query_device, "ibv_query_device");
    IBV_SYM(query_port, "ibv_query_port");
    IBV_SYM(query_gid, "ibv_query_gid");
    IBV_SYM(alloc_pd, "ibv_alloc_pd");
    IBV_SYM(dealloc_pd, "ibv_dealloc_pd");
    IBV_SYM(reg_mr, "ibv_reg_mr");
    IBV_SYM(dereg_mr, "ibv_dereg_mr");
    IBV_SYM(create_cq, "ibv_create_cq");
    IBV_SYM(destroy_cq, "ibv_destroy_cq");
    IBV_SYM(create_qp, "ibv_create_qp");
    IBV_SYM(modify_qp, "ibv_modify_qp");
    IBV_SYM(destroy_qp, "ibv_destroy_qp");
    IBV_SYM(get_async_event, "ibv_get_async_event");
    IBV_SYM(ack_async_event, "ibv_ack_async_event");
    IBV_SYM(event_type_str, "ibv_event_type_str");
    IBV_SYM(wc_status_str, "ibv_wc_status_str");
    IBV_SYM(create_comp_channel, "ibv_create_comp_channel");
    IBV_SYM(destroy_comp_channel, "ibv_destroy_comp_channel");
    IBV_SYM(get_cq_event, "ibv_get_cq_event");
    IBV_SYM(ack_cq_events, "ibv_ack_cq_events");
    ibv_loaded = &ibv_table;
    return;
missing:
    dlclose(lib);
}

const shoal_ibv_t *shoal_ibv(const char **why_p)
{
    pthread_once(&ibv_once, ibv_load);
    if (why_p)
        *why_p = ibv_why;
    return ibv_loaded;
}

int shoal_ibv_query_port(const shoal_ibv_t *v, struct ibv_context *ctx, uint8_t port,
                         struct ibv_port_attr *attr)
{
    struct verbs_context *vctx = verbs_get_ctx_op(ctx, query_port);
    if (vctx)
        return vctx->query_port(ctx, port, attr, sizeof(*attr));
    memset(attr, 0, sizeof(*attr));
    return v->query_port(ctx, port, (struct _compat_ibv_port_attr *)attr);
}
#endif
