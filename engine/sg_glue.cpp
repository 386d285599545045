// sg_glue.cpp - the C++ bridge for what SimGrid 3.32's C API lacks: direct host-to-host
// transfers (s4u::Comm::sendto_async) started and awaited by one actor. Nothing else lives
// here; see engine.h.
#include <simgrid/s4u/Comm.hpp>
#include <simgrid/s4u/Host.hpp>

#include <vector>

namespace sg4 = simgrid::s4u;

extern "C" {

struct npu_xfer;

npu_xfer* npu__xfer_start(sg_host_t from, sg_host_t to, double bytes, double rate)
{
  // The rate must be set before source and destination: setting both starts the comm.
  sg4::CommPtr c = sg4::Comm::sendto_init();
  if (rate > 0)
    c->set_rate(rate);
  // Whole bytes, as SimGrid counts them; a transfer of less than one byte (a collective of S
  // bytes split over more than S ranks) moves one byte: a 0-byte payload would truncate it away,
  // and SimGrid then reported a deadlock.
  c->set_payload_size(bytes > 0 && bytes < 1 ? 1 : static_cast<uint64_t>(bytes));
  c->set_source(from);
  c->set_destination(to);
  if (c->get_state() == sg4::Activity::State::INITED)
    c->start();
  sg4::Comm* raw = c.get();
  intrusive_ptr_add_ref(raw); // held until npu_xfer_release
  return reinterpret_cast<npu_xfer*>(raw);
}

ssize_t npu__xfer_wait_any(npu_xfer* const* xfers, size_t n, double timeout)
{
  // One engine per process and one actor waiting at a time: a reused vector saves an
  // allocation per wait (measured: 2-4% of event-fidelity time).
  static std::vector<sg4::CommPtr> v;
  v.clear();
  for (size_t i = 0; i < n; i++)
    v.emplace_back(reinterpret_cast<sg4::Comm*>(xfers[i]));
  ssize_t k = sg4::Comm::wait_any_for(v, timeout);
  v.clear();
  return k;
}

void npu__xfer_release(npu_xfer* x)
{
  intrusive_ptr_release(reinterpret_cast<sg4::Comm*>(x));
}

double npu__xfer_remaining(const npu_xfer* x)
{
  return reinterpret_cast<const sg4::Comm*>(x)->get_remaining();
}
}
