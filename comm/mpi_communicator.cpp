// The mpi communicator: MPI_COMM_WORLD, buffers in host memory. One progress thread makes
// every MPI call (initialization and finalization included, so MPI_THREAD_FUNNELED holds),
// running the collectives in the order they were asked for: blocking ones from the calling
// thread, bucket reductions from the compute stream's worker once the gradients they read
// are written. Every wait polls (MPI_Test*) so that it also sees a failure notice from
// another rank and gives up instead of hanging.
//
// The reduction is a ring on point-to-point messages in a fixed order (communicator.hpp),
// never MPI_Allreduce, whose summation order depends on the algorithm MPI picks.
//
// Failure protocol (notices on a communicator of their own): the failing rank sends "<exit
// code>:<what>" to every other rank; a rank that hears it throws rank_failed from its collectives,
// its caller reports the error and calls fail() in turn, which acknowledges. A rank in fail()
// waits until it has heard from every other rank (each has reported by then), or 10 s, and
// aborts the job; whoever aborts first ends everyone, after everyone has reported.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <limits>
#include <mutex>
#include <thread>

#include "memweave/comm/communicator.hpp"

namespace memweave {
namespace {

using clock_type = std::chrono::steady_clock;

constexpr int k_tag_notice = 1;  // "this rank failed", with its message
constexpr int k_tag_ack = 2;     // "heard of a failure, reported it"
constexpr std::size_t k_notice_bytes = 2048;

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw error(std::string("MPI: ") + call + " failed: " + std::string(text, len));
}

int as_int(std::size_t n, const char* what) {
  if (n > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    throw invalid_argument(std::string("MPI: ") + what + " of " + std::to_string(n) +
                           " elements is more than one MPI message carries (2^31-1)");
  }
  return static_cast<int>(n);
}

// What a bucket reduction's request and its job share.
struct reduction_state {
  std::mutex mu;
  std::condition_variable cv;
  bool posted = false;  // the stream handed the job to the progress thread
  bool done = false;
  std::exception_ptr failure;
  double reduce_s = 0;
  std::atomic<double> waited_s{0};

  void finish(std::exception_ptr e, double seconds) {
    std::lock_guard lock(mu);
    failure = std::move(e);
    reduce_s = seconds;
    done = true;
    cv.notify_all();
  }
  void wait_done() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done; });
  }
};

class mpi_communicator;

class mpi_request final : public comm_request {
 public:
  explicit mpi_request(std::shared_ptr<reduction_state> s) : state_(std::move(s)) {}
  // The job writes into the caller's buffers: they must outlive it.
  ~mpi_request() override {
    bool posted;
    {
      std::lock_guard lock(state_->mu);
      posted = state_->posted;
    }
    if (posted) state_->wait_done();
  }
  void wait_on(stream& s) override {
    s.launch([st = state_] {
      const auto t0 = clock_type::now();
      st->wait_done();
      st->waited_s = std::chrono::duration<double>(clock_type::now() - t0).count();
      if (st->failure) std::rethrow_exception(st->failure);
    });
  }
  double reduce_seconds() const noexcept override {
    std::lock_guard lock(state_->mu);
    return state_->reduce_s;
  }
  double waited_seconds() const noexcept override { return state_->waited_s; }

 private:
  std::shared_ptr<reduction_state> state_;
};

class mpi_communicator final : public communicator {
 public:
  mpi_communicator() {
    std::promise<void> ready;
    auto started = ready.get_future();
    worker_ = std::thread([this, &ready] { run(ready); });
    try {
      started.get();
    } catch (...) {
      {
        std::lock_guard lock(mu_);
        stop_ = true;
      }
      cv_.notify_all();
      worker_.join();
      throw;
    }
  }

  ~mpi_communicator() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  std::string name() const override { return "mpi"; }

  std::unique_ptr<comm_request> start_allreduce(std::vector<std::span<float>> buffers, float scale,
                                                stream& after) override {
    auto st = std::make_shared<reduction_state>();
    after.launch([this, st, scale, buffers = std::move(buffers)] {
      {
        std::lock_guard lock(st->mu);
        st->posted = true;
      }
      post([this, st, scale, buffers] {
        const auto t0 = clock_type::now();
        std::exception_ptr e;
        try {
          for (std::span<float> b : buffers) ring_allreduce(b, scale);
        } catch (...) {
          e = std::current_exception();
        }
        st->finish(e, std::chrono::duration<double>(clock_type::now() - t0).count());
      });
    });
    return std::make_unique<mpi_request>(std::move(st));
  }

  void broadcast(std::span<float> buffer, int root) override {
    bcast(buffer.data(), buffer.size(), MPI_FLOAT, root);
  }

  void broadcast_host(std::span<std::byte> buffer, int root) override {
    bcast(buffer.data(), buffer.size(), MPI_BYTE, root);
  }

  std::vector<double> allgather(std::span<const double> values) override {
    std::vector<double> out(values.size() * static_cast<std::size_t>(size_));
    blocking([&] {
      MPI_Request r;
      const int n = as_int(values.size(), "a gather");
      check(MPI_Iallgather(values.data(), n, MPI_DOUBLE, out.data(), n, MPI_DOUBLE, data_, &r),
            "MPI_Iallgather");
      wait_for(&r, 1);
    });
    return out;
  }

  void barrier() override {
    blocking([&] {
      MPI_Request r;
      check(MPI_Ibarrier(data_, &r), "MPI_Ibarrier");
      wait_for(&r, 1);
    });
  }

  int peer_failure_code() const noexcept override {
    return peer_code_.load(std::memory_order_acquire);
  }

  std::string peer_failure() const override {
    // failed_rank_ and failed_what_ are written once, before peer_code_'s release store.
    if (peer_failure_code() == 0) return {};
    return rank_failed(failed_rank_, failed_what_).what();
  }

  void fail(const std::string& what, int exit_code) noexcept override {
    if (size_ == 1) return;
    {
      std::lock_guard lock(mu_);
      const int code = exit_code >= 1 && exit_code <= 9 ? exit_code : 3;
      fail_message_ = (std::to_string(code) + ":" + what).substr(0, k_notice_bytes - 1);
      fail_code_ = exit_code;
      failing_ = true;
    }
    local_failed_ = true;
    cv_.notify_all();
    // The progress thread aborts the job; nothing returns from here.
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }

 private:
  // ---- the calling thread ----
  void post(std::function<void()> job) {
    {
      std::lock_guard lock(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_all();
  }

  template <class F>
  void blocking(F&& body) {
    std::promise<void> done;
    auto f = done.get_future();
    post([&] {
      try {
        body();
        done.set_value();
      } catch (...) {
        done.set_exception(std::current_exception());
      }
    });
    f.get();
  }

  void bcast(void* data, std::size_t count, MPI_Datatype type, int root) {
    blocking([&] {
      MPI_Request r;
      check(MPI_Ibcast(data, as_int(count, "a broadcast"), type, root, data_, &r), "MPI_Ibcast");
      wait_for(&r, 1);
    });
  }

  // ---- the progress thread ----
  void run(std::promise<void>& ready) {
    try {
      int initialized = 0;
      MPI_Initialized(&initialized);
      if (!initialized) {
        int provided = 0;
        check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
        owns_mpi_ = true;
      }
      check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
      check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
      check(MPI_Comm_dup(MPI_COMM_WORLD, &data_), "MPI_Comm_dup");
      check(MPI_Comm_dup(MPI_COMM_WORLD, &notices_), "MPI_Comm_dup");
      // Errors come back as codes, for check() to throw and the failure notices to reach
      // every rank; the default (MPI_ERRORS_ARE_FATAL) ended the job from inside MPI, with
      // its own exit code and no word of memweave's (a message truncated between ranks
      // given different networks).
      check(MPI_Comm_set_errhandler(data_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
      check(MPI_Comm_set_errhandler(notices_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
      // OpenMPI reports an error of MPI_Testall on MPI_COMM_WORLD, whatever communicator the
      // requests were on: still fatal there, it ended the job with exit 15 and no word of
      // memweave's (session 42's hostile run: ranks given different models at one path).
      // Only where memweave initialized MPI: a program that did owns its world's handler.
      if (owns_mpi_) {
        check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN),
              "MPI_Comm_set_errhandler");
        check(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
      }
      heard_.assign(static_cast<std::size_t>(size_), false);
      heard_[static_cast<std::size_t>(rank_)] = true;
      post_notice_receive();
      ready.set_value();
    } catch (...) {
      ready.set_exception(std::current_exception());
      return;
    }
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || failing_ || !jobs_.empty(); });
        if (failing_) break;
        if (jobs_.empty()) break;  // stop_, nothing left
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
    if (failing_) abort_job();
    MPI_Cancel(&notice_request_);
    MPI_Wait(&notice_request_, MPI_STATUS_IGNORE);
    MPI_Comm_free(&notices_);
    MPI_Comm_free(&data_);
    if (owns_mpi_) MPI_Finalize();
  }

  void post_notice_receive() {
    check(MPI_Irecv(notice_buffer_, k_notice_bytes, MPI_CHAR, MPI_ANY_SOURCE, MPI_ANY_TAG, notices_,
                    &notice_request_),
          "MPI_Irecv");
  }

  // Takes in every notice or acknowledgement that arrived.
  void poll_notices() {
    for (;;) {
      int arrived = 0;
      MPI_Status status;
      check(MPI_Test(&notice_request_, &arrived, &status), "MPI_Test");
      if (!arrived) return;
      heard_[static_cast<std::size_t>(status.MPI_SOURCE)] = true;
      if (status.MPI_TAG == k_tag_notice && failed_rank_ < 0) {
        int len = 0;
        MPI_Get_count(&status, MPI_CHAR, &len);
        failed_rank_ = status.MPI_SOURCE;
        failed_what_.assign(notice_buffer_, static_cast<std::size_t>(std::max(len, 0)));
        // "<code>:<what>"; a code of one digit, 1 to 9.
        int code = 3;
        if (failed_what_.size() >= 2 && failed_what_[1] == ':' && failed_what_[0] >= '1' &&
            failed_what_[0] <= '9') {
          code = failed_what_[0] - '0';
          failed_what_.erase(0, 2);
        }
        peer_code_.store(code, std::memory_order_release);
      }
      post_notice_receive();
    }
  }

  static void back_off(int& spins) {
    if (++spins < 200) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  void wait_for(MPI_Request* requests, int n) {
    int spins = 0;
    for (;;) {
      int done = 0;
      check(MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE), "MPI_Testall");
      if (done) return;
      poll_notices();
      if (failed_rank_ >= 0) throw rank_failed(failed_rank_, failed_what_);
      if (local_failed_) throw error("this rank failed; the collective was abandoned");
      back_off(spins);
    }
  }

  // Reduce-scatter then allgather around the ring rank -> rank + 1: at reduce step j, rank r
  // sends its partial sum of chunk (r - j) and adds its own values to the partial of chunk
  // (r - j - 1) it receives, so chunk c is summed in the fixed order c+1, c+2, ..., c.
  void ring_allreduce(std::span<float> buffer, float scale) {
    if (scale != 1.0f) {
      for (float& x : buffer) x *= scale;
    }
    if (size_ == 1 || buffer.empty()) return;
    const std::size_t n = buffer.size(), parts = static_cast<std::size_t>(size_);
    auto begin = [&](std::size_t c) { return c * n / parts; };
    auto chunk = [&](long c) {
      const std::size_t k = static_cast<std::size_t>(((c % size_) + size_) % size_);
      return buffer.subspan(begin(k), begin(k + 1) - begin(k));
    };
    const int right = (rank_ + 1) % size_, left = (rank_ + size_ - 1) % size_;
    scratch_.resize(n / parts + 1);
    for (int j = 0; j + 1 < size_; ++j) {
      const std::span<float> out = chunk(rank_ - j), in = chunk(rank_ - j - 1);
      MPI_Request r[2];
      check(MPI_Isend(out.data(), as_int(out.size(), "a chunk"), MPI_FLOAT, right, 0, data_, &r[0]),
            "MPI_Isend");
      check(MPI_Irecv(scratch_.data(), as_int(in.size(), "a chunk"), MPI_FLOAT, left, 0, data_,
                      &r[1]),
            "MPI_Irecv");
      wait_for(r, 2);
      for (std::size_t i = 0; i < in.size(); ++i) in[i] = scratch_[i] + in[i];
    }
    for (int j = 0; j + 1 < size_; ++j) {
      const std::span<float> out = chunk(rank_ + 1 - j), in = chunk(rank_ - j);
      MPI_Request r[2];
      check(MPI_Isend(out.data(), as_int(out.size(), "a chunk"), MPI_FLOAT, right, 0, data_, &r[0]),
            "MPI_Isend");
      check(MPI_Irecv(in.data(), as_int(in.size(), "a chunk"), MPI_FLOAT, left, 0, data_, &r[1]),
            "MPI_Irecv");
      wait_for(r, 2);
    }
  }

  // fail(): tell every other rank, wait until each has been heard from, end the job.
  [[noreturn]] void abort_job() noexcept {
    try {
      poll_notices();
      const int tag = failed_rank_ >= 0 ? k_tag_ack : k_tag_notice;
      std::vector<MPI_Request> sends;
      for (int p = 0; p < size_; ++p) {
        if (p == rank_) continue;
        sends.emplace_back();
        MPI_Isend(fail_message_.data(), static_cast<int>(fail_message_.size()), MPI_CHAR, p, tag,
                  notices_, &sends.back());
      }
      const auto deadline = clock_type::now() + std::chrono::seconds(10);
      int spins = 0;
      while (clock_type::now() < deadline &&
             !std::all_of(heard_.begin(), heard_.end(), [](bool h) { return h; })) {
        poll_notices();
        back_off(spins);
      }
    } catch (...) {
      // Aborting regardless: the job must end.
    }
    MPI_Abort(MPI_COMM_WORLD, fail_code_);
    std::_Exit(fail_code_);
  }

  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  bool failing_ = false;
  std::string fail_message_;
  int fail_code_ = 1;
  std::atomic<bool> local_failed_{false};

  // Written by the progress thread only (rank_ and size_ before the constructor returns).
  int rank_ = 0, size_ = 1;
  bool owns_mpi_ = false;
  MPI_Comm data_ = MPI_COMM_NULL, notices_ = MPI_COMM_NULL;
  MPI_Request notice_request_ = MPI_REQUEST_NULL;
  char notice_buffer_[k_notice_bytes] = {};
  std::vector<bool> heard_;
  int failed_rank_ = -1;
  std::string failed_what_;
  std::atomic<int> peer_code_{0};  // the failed rank's exit code, read by the calling thread
  std::vector<float> scratch_;
};

}  // namespace

std::unique_ptr<communicator> make_mpi_communicator() {
  return std::make_unique<mpi_communicator>();
}

}  // namespace memweave
