"""DDP communication hooks over shoal: plain and compressed gradient
averaging for torch.nn.parallel.DistributedDataParallel.

    import shoal.torch as st
    state = st.powersgd_state(rank=2, warmup=10)       # collective, after init
    ddp.register_comm_hook(state, st.powersgd_hook)
    ...
    torch.save({"model": ..., "optim": ..., "hook": state.state_dict()}, path)
    state.load_state_dict(torch.load(path)["hook"])   # into a fresh state too

Each hook averages its bucket (as DDP's default hook does) on a shoal
communicator of the ranks of DDP's process group, whatever that group's
backend (gloo or shoal), through shoal's non-blocking call: the hook
returns at once, and the state's waiter thread completes the future when
shoal's request does. The compressed hooks keep a compressor per bucket
(error feedback, PowerSGD's Q, the step), which state_dict() saves.

A hook takes the state of its own kind: allreduce_hook an allreduce_state,
int8_hook an int8_state, and so on (a TypeError says which otherwise).
Compressed buckets must be float32, float16 or bfloat16.
"""

import torch
import torch.distributed as dist

from .hook_state import HookState


def allreduce_state(process_group=None):
    """State of allreduce_hook: the plain average, in full precision."""
    return HookState(process_group)


def int8_state(process_group=None, *, error_feedback=True, block=None, stochastic=None,
               seed=0, algo=None):
    """State of int8_hook: one fp32 scale per block of values (32, 64,
    128; shoal's default 64), rounded to nearest or stochastically, with
    error feedback by default."""
    return HookState(process_group, "int8", error_feedback=error_feedback, block=block,
                     stochastic=stochastic, seed=seed, algo=algo)


def ternary_state(process_group=None, *, error_feedback=True, clip_sigma=2.5, block=None,
                  seed=0, algo=None):
    """State of ternary_hook: {-1, 0, +1} x a scale per block, stochastic
    rounding, gradients clipped at clip_sigma standard deviations (as
    TernGrad does; 0 for none), with error feedback by default."""
    return HookState(process_group, "ternary", error_feedback=error_feedback,
                     clip_sigma=clip_sigma, block=block, seed=seed, algo=algo)


def powersgd_state(process_group=None, *, rank=4, warmup=0, error_feedback=True, seed=0):
    """State of powersgd_hook: each matrix of a bucket (a weight is its
    first dimension by the rest) as a rank-`rank` product P Q^T, vectors in
    full precision; each bucket's first `warmup` calls are plain averages."""
    return HookState(process_group, "powersgd", rank=rank, warmup=warmup,
                     error_feedback=error_feedback, seed=seed)


def _hook(state, bucket, kind, name, maker):
    if not isinstance(state, HookState):
        raise TypeError("%s: the state must be a shoal hook state (shoal.torch.%s(...)), "
                        "got %s" % (name, maker, type(state).__name__))
    if state.kind != kind:
        raise TypeError("%s: the state is a %s state; make it with shoal.torch.%s(...)"
                        % (name, state.kind or "allreduce", maker))
    return state.reduce(bucket, name)


def allreduce_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The bucket averaged over the group in full precision."""
    return _hook(state, bucket, None, "allreduce_hook", "allreduce_state")


def int8_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The bucket averaged through shoal's int8 compressor."""
    return _hook(state, bucket, "int8", "int8_hook", "int8_state")


def ternary_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The bucket averaged through shoal's ternary compressor."""
    return _hook(state, bucket, "ternary", "ternary_hook", "ternary_state")


def powersgd_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The bucket averaged through shoal's PowerSGD compressor."""
    return _hook(state, bucket, "powersgd", "powersgd_hook", "powersgd_state")


__all__ = ["HookState", "allreduce_hook", "allreduce_state", "int8_hook", "int8_state",
           "powersgd_hook", "powersgd_state", "ternary_hook", "ternary_state"]
