/* The Python module shoal.torch._c10d: ProcessGroupShoal as a subclass of
 * torch's ProcessGroup, and the creator that torch.distributed calls for
 * backend "shoal" (shoal/torch/__init__.py registers it). */
#include <pybind11/pybind11.h>
#include <pybind11/chrono.h>

#include "shoal_c10d.hpp"

namespace py = pybind11;

/* As torch's own bindings declare it (torch/csrc/utils/pybind.h, whose
 * other casters this module does not need): the store arrives as one. */
PYBIND11_DECLARE_HOLDER_TYPE(T, c10::intrusive_ptr<T>, true);

namespace {

/* The holder torch gives its own process groups: the last reference,
 * dropped from Python, lets the GIL go while the group tears down (its
 * completion thread may need the GIL to finish). Same layout as
 * c10::intrusive_ptr, which torch's functions take. */
template <typename T> class NoGilHolder {
  public:
    NoGilHolder() = default;
    NoGilHolder(const NoGilHolder &) = default;
    explicit NoGilHolder(T *p) : impl_(c10::intrusive_ptr<T>::unsafe_reclaim_from_nonowning(p)) {}
    explicit NoGilHolder(c10::intrusive_ptr<T> p) : impl_(std::move(p)) {}
    ~NoGilHolder()
    {
        if (impl_ && PyGILState_Check()) {
            py::gil_scoped_release nogil;
            impl_.reset();
        }
    }
    T *get() const noexcept { return impl_.get(); }

  private:
    c10::intrusive_ptr<T> impl_;
};

} // namespace

PYBIND11_DECLARE_HOLDER_TYPE(T, NoGilHolder<T>, true);

PYBIND11_MODULE(_c10d, m)
{
    using shoal_c10d::ProcessGroupShoal;
    m.doc() = "shoal's c10d backend (import shoal.torch to register it)";
    py::object base = py::module::import("torch.distributed").attr("ProcessGroup");
    py::class_<ProcessGroupShoal, NoGilHolder<ProcessGroupShoal>>(m, "ProcessGroupShoal", base)
        .def(py::init([](const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                         std::chrono::milliseconds timeout) {
                 /* Joining waits for the other ranks: without the GIL, so
                  * that this process's other threads go on. */
                 py::gil_scoped_release nogil;
                 return NoGilHolder<ProcessGroupShoal>(
                     c10::make_intrusive<ProcessGroupShoal>(store, rank, size, timeout));
             }),
             py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
             "Join the shoal communicator of a group of size ranks (collective).")
        .def_property_readonly(
            "comm_handle",
            [](const ProcessGroupShoal &pg) { return reinterpret_cast<uintptr_t>(pg.comm()); },
            "The group's shoal_comm_t as an integer, owned by the group: for calls into "
            "libshoal on the same communicator (issue them in the same order on every rank).");
}
