// to_svg(): the report as a chart — admitted and rejected over time above, latency percentiles
// below.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <string>

#include "bench/report.h"
#include "core/duration.h"

namespace sluice::bench {
namespace {

constexpr double kWidth = 900;
constexpr double kLeft = 80;  // room for the y axis' labels
constexpr double kRight = 870;
constexpr double kTimeTop = 130;
constexpr double kTimeBottom = 350;
constexpr double kLatencyTop = 430;
constexpr std::size_t kLabelledBars = 12;  // up to this many bars, each says what it holds
constexpr double kBarHeight = 22;
constexpr double kBarGap = 8;

constexpr const char* kAdmittedColour = "#2e7d32";
constexpr const char* kRejectedColour = "#ef6c00";
constexpr const char* kOtherColour = "#757575";
constexpr const char* kErrorColour = "#c62828";
constexpr const char* kLatencyColour = "#1565c0";

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string text(double x, double y, const std::string& s, const char* extra = "") {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" " + extra + ">" + escape(s) + "</text>\n";
}

std::string rect(double x, double y, double w, double h, const char* fill) {
  return "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(std::max(w, 0.0)) +
         "\" height=\"" + num(std::max(h, 0.0)) + "\" fill=\"" + fill + "\"/>\n";
}

std::string line(double x1, double y1, double x2, double y2, const char* stroke) {
  return "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" +
         num(y2) + "\" stroke=\"" + stroke + "\"/>\n";
}

// A round step for about `ticks` ticks up to `max`: 1, 2 or 5 times a power of ten.
double tick_step(double max, int ticks) {
  if (max <= 0) return 1;
  const double raw = max / ticks;
  const double power = std::pow(10, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * power >= raw) return std::max(1.0, m * power);
  }
  return std::max(1.0, 10 * power);
}

std::string count_label(double v) {
  char buf[32];
  if (v >= 1e6) {
    std::snprintf(buf, sizeof buf, "%gM", v / 1e6);
  } else if (v >= 1e4) {
    std::snprintf(buf, sizeof buf, "%gk", v / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%g", v);
  }
  return buf;
}

std::string legend(double x, double y, const char* colour, const std::string& label) {
  return rect(x, y - 10, 12, 12, colour) + text(x + 17, y, label);
}

std::string timeline_panel(const Report& r) {
  std::string out;
  const std::string step = format_duration(r.step);
  out += text(kLeft, kTimeTop - 28, "Responses per " + step + ", by when they completed",
              "font-weight=\"bold\"");
  out += legend(kLeft + 430, kTimeTop - 28, kAdmittedColour, "admitted (2xx)");
  out += legend(kLeft + 545, kTimeTop - 28, kRejectedColour, "rejected (429)");
  out += legend(kLeft + 660, kTimeTop - 28, kOtherColour, "other");
  out += legend(kLeft + 715, kTimeTop - 28, kErrorColour, "errors");

  std::uint64_t highest = 0;
  for (const Counts& s : r.timeline) {
    highest = std::max(highest, s.admitted + s.rejected + s.other + s.errors);
  }
  const double tick = tick_step(static_cast<double>(highest), 5);
  const double top = std::max(tick, std::ceil(static_cast<double>(highest) / tick) * tick);
  const double height = kTimeBottom - kTimeTop;
  auto y_of = [&](double v) { return kTimeBottom - v / top * height; };
  for (double v = 0; v <= top + tick / 2; v += tick) {
    out += line(kLeft, y_of(v), kRight, y_of(v), "#e0e0e0");
    out += text(kLeft - 8, y_of(v) + 4, count_label(v), "text-anchor=\"end\"");
  }

  const std::size_t n = std::max<std::size_t>(1, r.timeline.size());
  const double slot = (kRight - kLeft) / static_cast<double>(n);
  const double bar = slot > 4 ? slot * 0.8 : slot;
  for (std::size_t i = 0; i < r.timeline.size(); ++i) {
    const Counts& s = r.timeline[i];
    double base = 0;
    const double x = kLeft + slot * static_cast<double>(i) + (slot - bar) / 2;
    const std::array<std::pair<std::uint64_t, const char*>, 4> parts{{{s.admitted, kAdmittedColour},
                                                                      {s.rejected, kRejectedColour},
                                                                      {s.other, kOtherColour},
                                                                      {s.errors, kErrorColour}}};
    for (const auto& [count, colour] : parts) {
      if (count == 0) continue;
      const double v = static_cast<double>(count);
      out += rect(x, y_of(base + v), bar, y_of(base) - y_of(base + v), colour);
      base += v;
    }
    if (r.timeline.size() <= kLabelledBars && base > 0) {
      out += "<text x=\"" + num(x + bar / 2) + "\" y=\"" + num(y_of(base) - 6) +
             "\" text-anchor=\"middle\"><tspan fill=\"" + kAdmittedColour + "\">" +
             std::to_string(s.admitted) + "</tspan> / <tspan fill=\"" + kRejectedColour + "\">" +
             std::to_string(s.rejected) + "</tspan></text>\n";
    }
  }
  out += line(kLeft, kTimeBottom, kRight, kTimeBottom, "#424242");

  // Time labels: at most about ten.
  const std::size_t every = std::max<std::size_t>(1, (n + 9) / 10);
  for (std::size_t i = 0; i <= n; i += every) {
    const double seconds =
        static_cast<double>((r.step * static_cast<std::int64_t>(i)).count()) / 1e9;
    char label[32];
    std::snprintf(label, sizeof label,
                  seconds < 10 && r.step.count() < 1'000'000'000 ? "%.1fs" : "%.0fs", seconds);
    const double x = kLeft + slot * static_cast<double>(i);
    out += line(x, kTimeBottom, x, kTimeBottom + 5, "#424242");
    out += text(x, kTimeBottom + 20, label, "text-anchor=\"middle\"");
  }
  return out;
}

std::string latency_panel(const Report& r) {
  std::string out;
  out += text(kLeft, kLatencyTop - 20, "Latency of the responses", "font-weight=\"bold\"");
  const LatencySummary& l = r.latency;
  const std::array<std::pair<const char*, double>, 6> rows{{{"min", l.min_us},
                                                            {"p50", l.p50_us},
                                                            {"p90", l.p90_us},
                                                            {"p99", l.p99_us},
                                                            {"p99.9", l.p999_us},
                                                            {"max", l.max_us}}};
  const double widest = std::max(l.max_us, 1e-9);
  const double room = kRight - kLeft - 90;  // leave space for the value after the bar
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& [label, us] = rows[i];
    const double y = kLatencyTop + static_cast<double>(i) * (kBarHeight + kBarGap);
    const double w = r.responses == 0 ? 0 : std::max(1.0, us / widest * room);
    out += text(kLeft - 8, y + kBarHeight * 0.7, label, "text-anchor=\"end\"");
    out += rect(kLeft, y, w, kBarHeight, kLatencyColour);
    out +=
        text(kLeft + w + 6, y + kBarHeight * 0.7, r.responses == 0 ? "-" : format_latency_us(us));
  }
  return out;
}

}  // namespace

std::string to_svg(const Report& r) {
  const double height = kLatencyTop + 6 * (kBarHeight + kBarGap) + 20;
  std::string out;
  out += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kWidth) + "\" height=\"" +
         num(height) + "\" viewBox=\"0 0 " + num(kWidth) + " " + num(height) +
         "\" font-family=\"sans-serif\" font-size=\"13\">\n";
  out += rect(0, 0, kWidth, height, "#ffffff");
  out += text(20, 28, "sluice bench " + r.url, "font-size=\"17\" font-weight=\"bold\"");
  char summary[256];
  std::snprintf(
      summary, sizeof summary,
      "%llu requests: %llu admitted, %llu rejected, %llu other, %llu errors; %.0f "
      "responses/s",
      static_cast<unsigned long long>(r.requests), static_cast<unsigned long long>(r.admitted),
      static_cast<unsigned long long>(r.rejected), static_cast<unsigned long long>(r.other),
      static_cast<unsigned long long>(r.errors), r.throughput_rps);
  out += text(20, 50, r.description, "fill=\"#424242\"");
  out += text(20, 68, summary, "fill=\"#424242\"");
  out += timeline_panel(r);
  out += latency_panel(r);
  out += "</svg>\n";
  return out;
}

}  // namespace sluice::bench
