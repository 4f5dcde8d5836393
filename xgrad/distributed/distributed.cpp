// The process group and the collectives, over MPI_COMM_WORLD.
#include <xgrad/distributed/distributed.hpp>

#include <mpi.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cxxabi.h>
#include <exception>
#include <typeinfo>

namespace xgrad::distributed {

namespace {
bool initialized = false;    // by us: init_process_group
std::terminate_handler previous_terminate = nullptr;

template <class T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() { return MPI_FLOAT; }
template <>
MPI_Datatype mpi_type<double>() { return MPI_DOUBLE; }
template <>
MPI_Datatype mpi_type<std::int64_t>() { return MPI_INT64_T; }

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::MAX ? MPI_MAX : MPI_SUM; }

void check_mpi(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw std::runtime_error(detail::concat("xgrad::distributed: ", what, " failed: ", std::string(text, length)));
}

void check_initialized(const char* who) {
  XGRAD_CHECK(initialized, "xgrad::distributed::", who,
              ": the process group is not initialized (call init_process_group() first)");
}

// MPI counts are ints: larger buffers throw rather than wrap.
int checked_count(std::size_t count, const char* who) {
  XGRAD_CHECK(count <= static_cast<std::size_t>(INT_MAX), "xgrad::distributed::", who, ": ", count,
              " elements is more than MPI's int count allows (", INT_MAX, ")");
  return static_cast<int>(count);
}

void check_src(int src, const char* who) {
  XGRAD_CHECK(src >= 0 && src < get_world_size(), "xgrad::distributed::", who, ": src must be a rank in [0, ",
              get_world_size(), "), got ", src);
}

// std::terminate handler: report the uncaught exception with the rank, then end the whole job.
[[noreturn]] void terminate_handler() {
  std::string what = "std::terminate called without an active exception";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      int status = 0;
      char* type = abi::__cxa_demangle(typeid(ex).name(), nullptr, nullptr, &status);
      what = detail::concat("uncaught exception (", status == 0 && type ? type : typeid(ex).name(), "): ", ex.what());
      std::free(type);
    } catch (...) {
      what = "uncaught exception of a non-std::exception type";
    }
  }
  abort(what, 1);
}

// A program that returns from main without destroy_process_group still finalizes MPI (else
// mpirun reports the rank as failed).
void finalize_at_exit() { destroy_process_group(); }

template <class T>
void divide_by_world(T* data, std::size_t count) {
  const T n = static_cast<T>(get_world_size());
  for (std::size_t i = 0; i < count; ++i) data[i] /= n;
}
}  // namespace

void init_process_group() {
  XGRAD_CHECK(!initialized, "init_process_group: the process group is already initialized");
  int already = 0;
  MPI_Initialized(&already);
  if (!already) {
    int provided = 0;
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  }
  // Errors come back as codes (and become exceptions) instead of aborting inside MPI.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  initialized = true;
  previous_terminate = std::set_terminate(terminate_handler);
  static const bool registered = (std::atexit(finalize_at_exit), true);
  (void)registered;
}

void destroy_process_group() {
  if (!initialized) return;
  initialized = false;
  std::set_terminate(previous_terminate);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

bool is_initialized() { return initialized; }

int get_rank() {
  check_initialized("get_rank");
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int get_world_size() {
  check_initialized("get_world_size");
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

void barrier() {
  check_initialized("barrier");
  check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
}

void abort(const std::string& message, int error_code) {
  int rank = -1;
  int mpi_up = 0, mpi_down = 0;
  MPI_Initialized(&mpi_up);
  MPI_Finalized(&mpi_down);
  if (mpi_up && !mpi_down) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "xgrad::distributed: rank %d: %s; aborting the job\n", rank, message.c_str());
  std::fflush(stderr);
  if (mpi_up && !mpi_down) MPI_Abort(MPI_COMM_WORLD, error_code);
  std::_Exit(error_code);
}

// ---- raw buffers ---------------------------------------------------------------------------------

template <class T>
void all_reduce(T* data, std::size_t count, ReduceOp op) {
  check_initialized("all_reduce");
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, data, checked_count(count, "all_reduce"), mpi_type<T>(), mpi_op(op),
                          MPI_COMM_WORLD),
            "MPI_Allreduce");
  if (op == ReduceOp::AVG) divide_by_world(data, count);
}

template <class T>
void broadcast(T* data, std::size_t count, int src) {
  check_initialized("broadcast");
  check_src(src, "broadcast");
  check_mpi(MPI_Bcast(data, checked_count(count, "broadcast"), mpi_type<T>(), src, MPI_COMM_WORLD), "MPI_Bcast");
}

template <class T>
T all_reduce_scalar(T value, ReduceOp op) {
  all_reduce(&value, 1, op);
  return value;
}

void broadcast_bytes(void* data, std::size_t bytes, int src) {
  check_initialized("broadcast_bytes");
  check_src(src, "broadcast_bytes");
  check_mpi(MPI_Bcast(data, checked_count(bytes, "broadcast_bytes"), MPI_BYTE, src, MPI_COMM_WORLD), "MPI_Bcast");
}

std::string broadcast_string(const std::string& s, int src) {
  std::int64_t length = static_cast<std::int64_t>(s.size());
  broadcast(&length, 1, src);
  std::string out = get_rank() == src ? s : std::string(static_cast<std::size_t>(length), '\0');
  if (length > 0) broadcast_bytes(out.data(), out.size(), src);
  return out;
}

std::vector<std::string> all_gather_string(const std::string& s) {
  check_initialized("all_gather_string");
  const int world = get_world_size();
  const int length = checked_count(s.size(), "all_gather_string");
  std::vector<int> lengths(static_cast<std::size_t>(world));
  check_mpi(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
  std::vector<int> offsets(static_cast<std::size_t>(world));
  std::size_t total = 0;
  for (int r = 0; r < world; ++r) {
    offsets[r] = checked_count(total, "all_gather_string");
    total += static_cast<std::size_t>(lengths[r]);
  }
  std::string all(total, '\0');
  check_mpi(MPI_Allgatherv(s.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR,
                           MPI_COMM_WORLD),
            "MPI_Allgatherv");
  std::vector<std::string> out;
  out.reserve(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) out.push_back(all.substr(static_cast<std::size_t>(offsets[r]),
                                                           static_cast<std::size_t>(lengths[r])));
  return out;
}

// ---- tensors --------------------------------------------------------------------------------------

namespace {
std::string shape_text(const Shape& shape) { return detail::concat(shape); }

// Every rank's shape must equal rank 0's; otherwise every rank throws the same message.
void check_same_shape(const Shape& shape, const char* who) {
  const std::vector<std::string> shapes = all_gather_string(shape_text(shape));
  for (std::size_t r = 1; r < shapes.size(); ++r)
    XGRAD_CHECK(shapes[r] == shapes[0], "xgrad::distributed::", who,
                ": every rank must pass a tensor of the same shape; rank 0 has ", shapes[0], ", rank ", r,
                " has ", shapes[r]);
}
}  // namespace

template <class T>
void all_reduce(Tensor<T>& t, ReduceOp op) {
  Array<T>& value = t.mutable_value();
  all_reduce(value.data(), value.size(), op);
}

template <class T>
void broadcast(Tensor<T>& t, int src) {
  Array<T>& value = t.mutable_value();
  broadcast(value.data(), value.size(), src);
}

template <class T>
std::vector<Tensor<T>> all_gather(const Tensor<T>& t) {
  check_initialized("all_gather");
  const Shape shape = t.shape();
  check_same_shape(shape, "all_gather");
  const int world = get_world_size();
  const Array<T>& value = t.value();
  const int count = checked_count(value.size(), "all_gather");
  checked_count(value.size() * static_cast<std::size_t>(world), "all_gather");
  std::vector<T> all(value.size() * static_cast<std::size_t>(world));
  // xt::xarray is contiguous row-major.
  check_mpi(MPI_Allgather(value.data(), count, mpi_type<T>(), all.data(), count, mpi_type<T>(), MPI_COMM_WORLD),
            "MPI_Allgather");
  std::vector<Tensor<T>> out;
  out.reserve(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    Array<T> a = empty_array<T>(shape, "all_gather");
    std::copy(all.begin() + static_cast<std::ptrdiff_t>(r) * count,
              all.begin() + static_cast<std::ptrdiff_t>(r + 1) * count, a.begin());
    out.emplace_back(std::move(a));
  }
  return out;
}

// ---- Work -----------------------------------------------------------------------------------------

struct Work::Impl {
  MPI_Request request = MPI_REQUEST_NULL;
  bool done = false;
};

Work::Work() = default;
Work::Work(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Work::Work(Work&&) noexcept = default;
Work& Work::operator=(Work&& other) noexcept {
  if (this != &other) {
    if (impl_ && !impl_->done) MPI_Wait(&impl_->request, MPI_STATUS_IGNORE);
    impl_ = std::move(other.impl_);
  }
  return *this;
}
Work::~Work() {
  if (impl_ && !impl_->done) MPI_Wait(&impl_->request, MPI_STATUS_IGNORE);
}

bool Work::is_completed() {
  XGRAD_CHECK(impl_ != nullptr, "Work::is_completed: this Work was not started");
  if (!impl_->done) {
    int flag = 0;
    check_mpi(MPI_Test(&impl_->request, &flag, MPI_STATUS_IGNORE), "MPI_Test");
    impl_->done = flag != 0;
  }
  return impl_->done;
}

void Work::wait() {
  XGRAD_CHECK(impl_ != nullptr, "Work::wait: this Work was not started");
  if (impl_->done) return;
  impl_->done = true;
  check_mpi(MPI_Wait(&impl_->request, MPI_STATUS_IGNORE), "MPI_Wait");
}

template <class T>
Work all_reduce_async(T* data, std::size_t count, ReduceOp op) {
  check_initialized("all_reduce_async");
  auto impl = std::make_unique<Work::Impl>();
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, data, checked_count(count, "all_reduce_async"), mpi_type<T>(),
                           mpi_op(op), MPI_COMM_WORLD, &impl->request),
            "MPI_Iallreduce");
  return Work(std::move(impl));
}

#define XGRAD_INSTANTIATE_RAW(T)                                      \
  template void all_reduce<T>(T*, std::size_t, ReduceOp);            \
  template void broadcast<T>(T*, std::size_t, int);                   \
  template T all_reduce_scalar<T>(T, ReduceOp);                       \
  template Work all_reduce_async<T>(T*, std::size_t, ReduceOp);
XGRAD_INSTANTIATE_RAW(float)
XGRAD_INSTANTIATE_RAW(double)
XGRAD_INSTANTIATE_RAW(std::int64_t)
#undef XGRAD_INSTANTIATE_RAW

#define XGRAD_INSTANTIATE(T)                                           \
  template void all_reduce<T>(Tensor<T>&, ReduceOp);                   \
  template void broadcast<T>(Tensor<T>&, int);                         \
  template std::vector<Tensor<T>> all_gather<T>(const Tensor<T>&);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad::distributed
