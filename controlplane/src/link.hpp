// A framed message connection on an asio stream socket (TCP between daemons,
// unix between gossamerctl and gossamerd; gossamerctl uses it too).
// Single-threaded: everything runs on one io_context.
#pragma once

#include <fcntl.h>

#include <array>
#include <deque>
#include <utility>  // before asio: Boost 1.74's awaitable.hpp uses std::exchange
#include <functional>
#include <memory>
#include <string>

#include <boost/asio.hpp>

#include "proto.hpp"

namespace gossamer::cp {

template <class Socket>
class Link : public std::enable_shared_from_this<Link<Socket>> {
 public:
  // Called per message; may call close() or send().
  using OnMessage = std::function<void(Type, std::string_view body)>;
  // Called once, when the link closes for any reason (never from close() itself
  // synchronously, so the caller's state stays valid while it runs).
  using OnClose = std::function<void(const std::string& why)>;

  Link(Socket s, std::uint32_t max_body) : socket_(std::move(s)), max_body_(max_body) {}

  void start(OnMessage on_message, OnClose on_close) {
    on_message_ = std::move(on_message);
    on_close_ = std::move(on_close);
    read_header();
  }
  void set_max_body(std::uint32_t n) { max_body_ = n; }

  template <class M>
  void send(Type t, const M& m) {
    send_raw(frame(t, encode(m)));
  }
  void send_raw(std::string bytes) {
    if (closed_) return;
    queued_bytes_ += bytes.size();
    out_.push_back(std::move(bytes));
    if (out_.size() == 1) write_next();
  }
  // Bytes accepted by send() and not yet written: the caller's back-pressure.
  std::size_t queued_bytes() const { return queued_bytes_; }

  // Closes after the queued messages are written (or at once if `now`).
  void close(const std::string& why, bool now = false) {
    if (closed_) return;
    why_ = why;
    if (now || out_.empty()) {
      shutdown();
    } else {
      closing_ = true;
    }
  }
  bool closed() const { return closed_; }
  Socket& socket() { return socket_; }

  // Ends the link but not the connection (a bulk connection, handed to an
  // application instance): reads no further message, and once the queued
  // ones are written calls `taken`, from the event loop, with the socket as a
  // plain close-on-exec descriptor (>= 3, blocking), or -1 if that failed.
  // Call it from on_message, where no read is pending, so that no byte after
  // the last message is consumed. A write that fails first closes the link
  // as usual (on_close, no `taken`); after the hand-over on_close is never
  // called.
  void hand_over(std::function<void(int fd)> taken) {
    if (closed_ || closing_) return;
    handing_over_ = true;
    taken_ = std::move(taken);
    if (out_.empty()) finish_hand_over();
  }

 private:
  void read_header() {
    auto self = this->shared_from_this();
    boost::asio::async_read(socket_, boost::asio::buffer(header_),
                            [this, self](boost::system::error_code ec, std::size_t) {
                              if (closed_) return;
                              if (ec) return fail(ec == boost::asio::error::eof ? "closed by the other end"
                                                                                : ec.message());
                              std::uint32_t len;
                              Type t;
                              if (!parse_header(header_.data(), &len, &t)) return fail("malformed header");
                              if (len > max_body_)
                                return fail("message of " + std::to_string(len) + " bytes (limit " +
                                            std::to_string(max_body_) + ")");
                              type_ = t;
                              body_.resize(len);
                              read_body();
                            });
  }
  void read_body() {
    auto self = this->shared_from_this();
    boost::asio::async_read(socket_, boost::asio::buffer(body_),
                            [this, self](boost::system::error_code ec, std::size_t) {
                              if (closed_) return;
                              if (ec) return fail(ec.message());
                              on_message_(type_, body_);
                              if (!closed_ && !closing_ && !handing_over_) read_header();
                            });
  }
  void write_next() {
    auto self = this->shared_from_this();
    boost::asio::async_write(socket_, boost::asio::buffer(out_.front()),
                             [this, self](boost::system::error_code ec, std::size_t) {
                               if (closed_) return;
                               if (ec) return fail(ec.message());
                               queued_bytes_ -= out_.front().size();
                               out_.pop_front();
                               if (!out_.empty()) return write_next();
                               if (closing_) return shutdown();
                               if (handing_over_) finish_hand_over();
                             });
  }
  void fail(const std::string& why) {
    if (why_.empty()) why_ = why;
    shutdown();
  }
  void shutdown() {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ignored;
    socket_.shutdown(Socket::shutdown_both, ignored);
    socket_.close(ignored);
    out_.clear();
    queued_bytes_ = 0;
    // Report from the event loop, not from inside the caller.
    auto self = this->shared_from_this();
    boost::asio::post(socket_.get_executor(), [this, self] {
      if (on_close_) {
        auto cb = std::move(on_close_);
        on_message_ = nullptr;
        cb(why_);
      }
    });
  }

  void finish_hand_over() {
    closed_ = true;
    // release(), not close(): close() leaves the descriptor in the reactor's
    // epoll set, assuming close(2) removes it, which it does not while the
    // duplicate keeps the socket open (events would then reach freed state).
    // release() deregisters it explicitly, and neither calls shutdown(), which
    // would end the connection for the duplicate too.
    boost::system::error_code ec;
    const int raw = socket_.release(ec);
    int fd = -1;
    if (!ec) {
      fd = ::fcntl(raw, F_DUPFD_CLOEXEC, 3);
      ::close(raw);
    }
    // asio made the socket non-blocking; its new owner gets the default mode.
    if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    out_.clear();
    queued_bytes_ = 0;
    auto self = this->shared_from_this();
    boost::asio::post(socket_.get_executor(), [this, self, fd] {
      on_message_ = nullptr;
      on_close_ = nullptr;
      auto cb = std::move(taken_);
      cb(fd);
    });
  }

  Socket socket_;
  std::uint32_t max_body_;
  std::array<std::uint8_t, kHeaderBytes> header_{};
  Type type_{};
  std::string body_;
  std::deque<std::string> out_;
  std::size_t queued_bytes_ = 0;
  OnMessage on_message_;
  OnClose on_close_;
  std::function<void(int)> taken_;
  std::string why_;
  bool closed_ = false, closing_ = false, handing_over_ = false;
};

using TcpLink = Link<boost::asio::ip::tcp::socket>;
using UnixLink = Link<boost::asio::local::stream_protocol::socket>;

}  // namespace gossamer::cp
