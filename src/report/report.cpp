// anvil report: metrics lines into the HTML page and the terminal summary (see report.h).
#include "report/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

#include "core/duration.h"
#include "core/error.h"
#include "core/json.h"
#include "core/log.h"

namespace anvil {
namespace {

std::optional<double> number(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}

std::string fmt(const char* format, double v) {
  char b[64];
  std::snprintf(b, sizeof b, format, v);
  return b;
}

std::string escape_html(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// 26700 -> "26,700"
std::string grouped(double v) {
  std::string digits = fmt("%.0f", std::abs(v)), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (v < 0 ? "-" : "") + out;
}

// ---- charts

struct Series {
  std::string name, label, color;
  std::vector<std::pair<double, double>> points;  // (step, value)
  bool dashed = false, markers = false;
  std::string run;  // the run's label
};

struct Axis {
  double lo = 0, hi = 1, step = 1;
};

// Round bounds and a tick step of 1, 2 or 5 times a power of ten, about `ticks` ticks.
Axis nice_axis(double lo, double hi, bool from_zero, int ticks = 5) {
  if (from_zero) lo = std::min(lo, 0.0);
  if (!(hi > lo)) {
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / ticks, mag = std::pow(10, std::floor(std::log10(raw))), f = raw / mag;
  Axis a;
  a.step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
  a.lo = std::floor(lo / a.step + 1e-9) * a.step;
  a.hi = std::ceil(hi / a.step - 1e-9) * a.step;
  return a;
}

std::string tick_label(double v, double step) {
  if (std::abs(v) < step * 1e-6) return "0";
  if (step >= 1) return std::abs(v) >= 10000 && std::fmod(v, 1000) == 0 ? grouped(v / 1000) + "k" : grouped(v);
  if (step < 1e-3) return fmt("%.1e", v);
  const int decimals = static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

std::string value_text(double v) {
  if (v != 0 && (std::abs(v) < 1e-3 || std::abs(v) >= 1e6)) return fmt("%.4g", v);
  if (std::abs(v) >= 1000) return grouped(v);
  return fmt("%.4g", v);
}

constexpr double kW = 640, kH = 300, kLeft = 72, kRight = 20, kTop = 16, kBottom = 46;

// The plotting area of a chart: its axes, and where a data point lands in the SVG.
struct Plot {
  Axis ax, ay;
  double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  double px(double x) const { return kLeft + (x - ax.lo) / (ax.hi - ax.lo) * pw; }
  double py(double y) const { return kTop + (ay.hi - y) / (ay.hi - ay.lo) * ph; }
};

// The grid, the ticks and their labels, the x axis and the axis labels.
std::string plot_axes(const Plot& p, const std::string& y_label) {
  const Axis &ax = p.ax, &ay = p.ay;
  const double pw = p.pw, ph = p.ph;
  std::string svg;
  for (double y = ay.lo; y <= ay.hi + ay.step * 1e-6; y += ay.step) {
    svg += "<line class=\"grid\" x1=\"" + fmt("%.1f", kLeft) + "\" x2=\"" + fmt("%.1f", kLeft + pw) + "\" y1=\"" +
           fmt("%.1f", p.py(y)) + "\" y2=\"" + fmt("%.1f", p.py(y)) + "\"/>";
    svg += "<text class=\"tick\" x=\"" + fmt("%.1f", kLeft - 8) + "\" y=\"" + fmt("%.1f", p.py(y) + 4) +
           "\" text-anchor=\"end\">" + tick_label(y, ay.step) + "</text>";
  }
  for (double x = ax.lo; x <= ax.hi + ax.step * 1e-6; x += ax.step) {
    svg += "<line class=\"xtick\" x1=\"" + fmt("%.1f", p.px(x)) + "\" x2=\"" + fmt("%.1f", p.px(x)) + "\" y1=\"" +
           fmt("%.1f", kTop + ph) + "\" y2=\"" + fmt("%.1f", kTop + ph + 5) + "\"/>";
    svg += "<text class=\"tick\" x=\"" + fmt("%.1f", p.px(x)) + "\" y=\"" + fmt("%.1f", kTop + ph + 19) +
           "\" text-anchor=\"middle\">" + tick_label(x, std::max(ax.step, 1.0)) + "</text>";
  }
  svg += "<line class=\"axis\" x1=\"" + fmt("%.1f", kLeft) + "\" x2=\"" + fmt("%.1f", kLeft + pw) + "\" y1=\"" +
         fmt("%.1f", kTop + ph) + "\" y2=\"" + fmt("%.1f", kTop + ph) + "\"/>";
  svg += "<text class=\"label\" x=\"" + fmt("%.1f", kLeft + pw / 2) + "\" y=\"" + fmt("%.1f", kH - 6) +
         "\" text-anchor=\"middle\">step</text>";
  svg += "<text class=\"label\" transform=\"translate(16 " + fmt("%.1f", kTop + ph / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" + escape_html(y_label) + "</text>";
  return svg;
}

// One series: its line, and a circle per point carrying the value as a tooltip (markers
// are drawn where they stay readable).
std::string plot_series(const Plot& p, const Series& s) {
  // A solid line without markers is smoothed by the page's slider (the eval loss and the plan are not).
  const bool smooth = !s.dashed && !s.markers;
  std::string svg = "<g class=\"series\" data-series=\"" + s.name + "\" data-count=\"" +
                    std::to_string(s.points.size()) + "\" data-run=\"" + escape_html(s.run) +
                    "\"><polyline fill=\"none\" stroke=\"" + s.color +
                    "\" stroke-width=\"2\" stroke-linejoin=\"round\"" + (s.dashed ? " stroke-dasharray=\"6 4\"" : "") +
                    (smooth ? " data-smooth=\"1\"" : "") + " points=\"";
  for (auto [x, y] : s.points) svg += fmt("%.2f", p.px(x)) + "," + fmt("%.2f", p.py(y)) + " ";
  svg += "\"/>";
  const bool dots = s.markers || (!s.dashed && s.points.size() <= 60);
  for (auto [x, y] : s.points)
    svg += "<circle cx=\"" + fmt("%.2f", p.px(x)) + "\" cy=\"" + fmt("%.2f", p.py(y)) + "\" r=\"" +
           (dots ? "3" : "6") + "\" fill=\"" + (dots ? s.color : "transparent") + "\"><title>" +
           escape_html(s.label) + " at step " + fmt("%.0f", x) + ": " + value_text(y) + "</title></circle>";
  return svg + "</g>";
}

std::string chart(const std::string& id, const std::string& title, const std::string& y_label,
                  const std::vector<Series>& series, bool from_zero, const std::string& empty_note) {
  std::string legend;
  for (const Series& s : series)
    legend += "<span class=\"key\"><i style=\"background:" + s.color + (s.dashed ? ";opacity:.6" : "") + "\"></i>" +
              escape_html(s.label) + "</span>";
  std::string svg = "<svg viewBox=\"0 0 " + fmt("%.0f", kW) + " " + fmt("%.0f", kH) +
                    "\" role=\"img\" aria-label=\"" + escape_html(title) + "\">";
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const Series& s : series)
    for (auto [x, y] : s.points) {
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  if (!std::isfinite(x0)) {
    svg += "<text class=\"empty\" x=\"" + fmt("%.0f", kW / 2) + "\" y=\"" + fmt("%.0f", kH / 2) +
           "\" text-anchor=\"middle\">" + escape_html(empty_note) + "</text>";
  } else {
    const Plot p{nice_axis(x0, x1, false, 6), nice_axis(y0, y1, from_zero)};
    svg += plot_axes(p, y_label);
    for (const Series& s : series) svg += plot_series(p, s);
  }
  svg += "</svg>";
  return "<figure class=\"chart\" id=\"" + id + "\"><figcaption><h2>" + escape_html(title) +
         "</h2><div class=\"legend\">" + legend + "</div></figcaption>" + svg + "</figure>\n";
}

constexpr const char* kRunColors[] = {"#2563eb", "#ea580c", "#16a34a", "#9333ea", "#0891b2", "#db2777", "#ca8a04",
                                      "#64748b"};

// A chart's series of one quantity, one per run: in `color` for a single run, else in the run's.
std::vector<Series> series_of(const std::vector<Metrics>& runs, const std::string& name, const std::string& label,
                              const std::string& color, std::optional<double> MetricsRow::*field, double scale = 1) {
  std::vector<Series> out;
  for (size_t k = 0; k < runs.size(); ++k) {
    const Metrics& m = runs[k];
    Series s{name, runs.size() == 1 ? label : label + " (" + m.label() + ")",
             runs.size() == 1 ? color : kRunColors[k % std::size(kRunColors)], {}, false, false, m.label()};
    for (const MetricsRow& r : m.rows)
      if (r.*field) s.points.emplace_back(static_cast<double>(r.step), *(r.*field) * scale);
    if (!s.points.empty()) out.push_back(std::move(s));
  }
  return out;
}

std::string card(const std::string& key, const std::string& value, const std::string& sub) {
  return "<div class=\"card\"><div class=\"k\">" + escape_html(key) + "</div><div class=\"v\">" + escape_html(value) +
         "</div><div class=\"s\">" + escape_html(sub) + "</div></div>";
}

constexpr const char* kStyle = R"(
:root { --ink: #0f172a; --muted: #64748b; --line: #e2e8f0; }
* { box-sizing: border-box; }
body { margin: 0; padding: 28px 32px 40px; background: #f4f6fa; color: var(--ink);
       font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
header { display: flex; align-items: baseline; gap: 16px; flex-wrap: wrap; margin-bottom: 18px; }
h1 { font-size: 22px; margin: 0; font-weight: 650; letter-spacing: -0.01em; }
header .src { color: var(--muted); margin: 0; font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 13px; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(170px, 1fr)); gap: 12px; margin-bottom: 18px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 10px; padding: 12px 16px; }
.card .k { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .05em; }
.card .v { font-size: 22px; font-weight: 650; margin-top: 2px; font-variant-numeric: tabular-nums; }
.card .s { color: var(--muted); font-size: 12px; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 16px; }
figure.chart { margin: 0; background: #fff; border: 1px solid var(--line); border-radius: 10px; padding: 14px 16px 8px; }
figcaption { display: flex; justify-content: space-between; align-items: baseline; gap: 12px; flex-wrap: wrap; }
figcaption h2 { font-size: 15px; margin: 0; font-weight: 600; }
.legend { display: flex; gap: 14px; color: var(--muted); font-size: 12px; }
.legend .key i { display: inline-block; width: 14px; height: 3px; border-radius: 2px; vertical-align: middle; margin-right: 6px; }
svg { width: 100%; height: auto; display: block; margin-top: 6px; }
svg .grid { stroke: var(--line); stroke-width: 1; }
svg .axis, svg .xtick { stroke: #94a3b8; stroke-width: 1; }
svg .tick { fill: var(--muted); font-size: 11px; font-variant-numeric: tabular-nums; }
svg .label { fill: var(--muted); font-size: 12px; }
svg .empty { fill: #94a3b8; font-size: 14px; }
svg circle:hover { r: 5; }
footer { color: var(--muted); font-size: 12px; margin-top: 20px; }
h3.run { font-size: 14px; margin: 6px 0 8px; font-weight: 600; }
.smooth { margin-left: auto; color: var(--muted); font-size: 13px; display: flex; align-items: center; gap: 8px; }
)";

// The smoothing slider (TensorBoard's): 0 draws the logged values, w near 1 a long average.
constexpr const char* kSmoothControl =
    "<label class=\"smooth\">smoothing <input id=\"smooth\" type=\"range\" min=\"0\" max=\"0.99\" step=\"0.01\" "
    "value=\"0\"> <output id=\"smooth-value\">0.00</output></label>";

// TensorBoard's debiased exponential moving average over each smoothable line's points, in
// the SVG's coordinates (the value axis is linear, so it is the same average of the values).
constexpr const char* kSmoothScript = R"(
(function () {
  var lines = Array.prototype.slice.call(document.querySelectorAll('polyline[data-smooth]'));
  lines.forEach(function (l) { l.rawPoints = l.getAttribute('points'); });
  function smooth(w) {
    lines.forEach(function (l) {
      if (w <= 0) { l.setAttribute('points', l.rawPoints); return; }
      var last = 0, n = 0, out = [];
      l.rawPoints.trim().split(/\s+/).forEach(function (p) {
        var xy = p.split(',');
        last = last * w + (1 - w) * Number(xy[1]);
        n += 1;
        out.push(xy[0] + ',' + (last / (1 - Math.pow(w, n))).toFixed(2));
      });
      l.setAttribute('points', out.join(' '));
    });
    document.getElementById('smooth-value').textContent = w.toFixed(2);
  }
  var slider = document.getElementById('smooth');
  slider.addEventListener('input', function () { smooth(Number(slider.value)); });
  var asked = /smooth=([0-9.]+)/.exec(location.hash);
  if (asked) slider.value = asked[1];
  smooth(Number(slider.value));
})();
)";

}  // namespace

namespace {

MetricsRow row_of(const Json& j) {
  MetricsRow r;
  r.step = j["step"].get<int64_t>();
  r.loss = number(j, "loss");
  r.eval_loss = number(j, "eval_loss");
  r.lr = number(j, "lr");
  r.grad_norm = number(j, "grad_norm");
  r.tokens_per_s = number(j, "tokens_per_s");
  r.mean_tokens_per_s = number(j, "mean_tokens_per_s");
  r.mfu = number(j, "mfu");
  r.peak_mem_gib = number(j, "peak_mem_gib");
  r.planned_mem_gib = number(j, "planned_mem_gib");
  r.elapsed_s = number(j, "elapsed_s");
  r.rewards_chosen = number(j, "rewards/chosen");
  r.rewards_rejected = number(j, "rewards/rejected");
  r.rewards_margins = number(j, "rewards/margins");
  r.rewards_accuracies = number(j, "rewards/accuracies");
  r.eval_rewards_margins = number(j, "eval_rewards/margins");
  r.eval_rewards_accuracies = number(j, "eval_rewards/accuracies");
  return r;
}

// One run's records as they are read: by step (the latest line wins), and its segments.
struct RunReader {
  Metrics m;
  std::map<int64_t, MetricsRow> by_step;
  int64_t prev_step = -1;
  double prev_elapsed = -1, segment_elapsed = 0;

  void add(const MetricsRow& r) {
    // A step or an elapsed time going back: the run resumed (another segment).
    const bool segment = m.runs == 0 || r.step <= prev_step || (r.elapsed_s && *r.elapsed_s < prev_elapsed);
    if (segment) {
      m.elapsed_s += segment_elapsed;
      segment_elapsed = 0;
      ++m.runs;
    }
    if (r.elapsed_s) segment_elapsed = *r.elapsed_s, prev_elapsed = *r.elapsed_s;
    else if (segment) prev_elapsed = -1;
    prev_step = r.step;
    by_step[r.step] = r;
  }
  Metrics finish() {
    m.elapsed_s += segment_elapsed;
    for (auto& [step, r] : by_step) m.rows.push_back(r);
    return m;
  }
};

}  // namespace

std::string Metrics::label() const { return run_id.empty() ? source : "run " + run_id; }

std::vector<Metrics> read_metrics(const std::string& path) {
  std::ifstream in(path);
  ANVIL_ENSURE(in.good(), kNotFound, path, ": cannot open (give a file written by anvil train --metrics)");
  std::vector<Metrics> runs;
  RunReader run;
  run.m.source = path;
  std::string line;
  int64_t line_no = 0;
  auto close_run = [&] {
    if (!run.by_step.empty()) runs.push_back(run.finish());
  };
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    if (in.eof() && Json::parse(line, nullptr, false).is_discarded()) {  // no newline: still being written, or torn
      log_warn(where, ": the last line is incomplete (a run writing it, or killed while it did): left out");
      break;
    }
    const Json j = json_parse(line, where);
    if (j.is_object() && !j.contains("step") && j.contains("run_id") && j["run_id"].is_string()) {
      const std::string id = j["run_id"].get<std::string>();
      if (id == run.m.run_id) continue;  // a resume of the same run: its records continue it
      close_run();
      run = RunReader{};
      run.m.source = path;
      run.m.run_id = id;
      continue;
    }
    ANVIL_ENSURE(j.is_object() && j.contains("step") && j["step"].is_number_integer(), kInvalidInput, where,
                 ": expected a JSON object with an integer \"step\" (or a run's header, with \"run_id\")");
    run.add(row_of(j));
  }
  close_run();
  ANVIL_ENSURE(!runs.empty(), kInvalidInput, path, ": no metrics lines (is it a --metrics file of anvil train?)");
  return runs;
}

ReportSummary summarize(const Metrics& m) {
  ReportSummary s;
  s.first_step = m.rows.front().step;
  s.last_step = m.rows.back().step;
  s.logged = static_cast<int64_t>(m.rows.size());
  s.elapsed_s = m.elapsed_s;
  double tps = 0, mfu = 0;
  int64_t n_tps = 0, n_mfu = 0;
  std::optional<double> run_tps;  // the train log's figure, from the last record carrying it
  std::optional<double> mfu_per_tps;  // MFU is tokens/s times a constant of the run
  // As the trainer's own figure, the first 10 steps are not timed when later ones exist.
  const bool skip_warm = s.warm_excluded = s.last_step > 10;
  for (const MetricsRow& r : m.rows) {
    if (r.loss) {
      s.final_loss = r.loss;
      if (!s.best_loss || *r.loss < *s.best_loss) s.best_loss = r.loss, s.best_loss_step = r.step;
    }
    if (r.eval_loss) {
      s.final_eval = r.eval_loss;
      if (!s.best_eval || *r.eval_loss < *s.best_eval) s.best_eval = r.eval_loss, s.best_eval_step = r.step;
    }
    if (r.peak_mem_gib) s.peak_mem_gib = std::max(s.peak_mem_gib.value_or(0), *r.peak_mem_gib);
    if (r.planned_mem_gib) s.planned_mem_gib = r.planned_mem_gib;
    if (r.mean_tokens_per_s) run_tps = r.mean_tokens_per_s;
    if (r.mfu && r.tokens_per_s && *r.tokens_per_s > 0) mfu_per_tps = *r.mfu / *r.tokens_per_s;
    if (skip_warm && r.step <= 10) continue;
    if (r.tokens_per_s) tps += *r.tokens_per_s, ++n_tps;
    if (r.mfu) mfu += *r.mfu, ++n_mfu;
  }
  if (n_tps) s.mean_tokens_per_s = tps / static_cast<double>(n_tps);
  if (run_tps) s.mean_tokens_per_s = run_tps, s.tokens_as_log = true;
  if (n_mfu) s.mean_mfu = mfu / static_cast<double>(n_mfu);
  if (run_tps && mfu_per_tps) s.mean_mfu = *run_tps * *mfu_per_tps;  // the train log's MFU
  return s;
}

// What the tokens/s figure is: the train log's (tokens over step time), or for records
// written before they carried it, the mean of the logged steps' figures.
std::string tokens_basis(const ReportSummary& s) {
  if (s.tokens_as_log)
    return std::string("tokens over step time") + (s.warm_excluded ? ", first 10 steps excluded" : "") +
           ", as the train log";
  return s.warm_excluded ? "mean of the logged steps after step 10" : "mean of the logged steps";
}

std::string summary_text(const ReportSummary& s) {
  std::string t;
  t += "steps       " + std::to_string(s.first_step) + " to " + std::to_string(s.last_step) + " (" +
       std::to_string(s.logged) + " logged)\n";
  if (s.final_loss)
    t += "loss        final " + fmt("%.4f", *s.final_loss) + ", best " + fmt("%.4f", *s.best_loss) + " at step " +
         std::to_string(s.best_loss_step) + "\n";
  if (s.final_eval)
    t += "eval loss   final " + fmt("%.4f", *s.final_eval) + ", best " + fmt("%.4f", *s.best_eval) + " at step " +
         std::to_string(s.best_eval_step) + "\n";
  if (s.mean_tokens_per_s)
    t += "tokens/s    " + grouped(*s.mean_tokens_per_s) +
         (s.mean_mfu ? ", MFU " + fmt("%.1f", 100 * *s.mean_mfu) + "%" : std::string()) + " (" + tokens_basis(s) +
         ")\n";
  if (s.peak_mem_gib)
    t += "memory      peak " + fmt("%.2f", *s.peak_mem_gib) + " GiB" +
         (s.planned_mem_gib ? " (planned " + fmt("%.2f", *s.planned_mem_gib) + " GiB)" : std::string()) + "\n";
  t += "time        " + (s.elapsed_s > 0 ? format_hms(s.elapsed_s) : std::string("not recorded")) + "\n";
  return t;
}

namespace {

// The cards atop the report: steps, loss, eval loss, throughput, MFU, memory and time.
std::string summary_cards(const ReportSummary& s) {
  std::string h;
  h += card("Steps", std::to_string(s.last_step), std::to_string(s.logged) + " logged");
  if (s.final_loss)
    h += card("Loss", fmt("%.4f", *s.final_loss), "best " + fmt("%.4f", *s.best_loss) + " at step " +
                                                     std::to_string(s.best_loss_step));
  if (s.final_eval)
    h += card("Eval loss", fmt("%.4f", *s.final_eval), "best " + fmt("%.4f", *s.best_eval) + " at step " +
                                                          std::to_string(s.best_eval_step));
  if (s.mean_tokens_per_s)
    h += card("Tokens/s", grouped(*s.mean_tokens_per_s), tokens_basis(s));
  if (s.mean_mfu) h += card("MFU", fmt("%.1f", 100 * *s.mean_mfu) + "%", "mean, dense bf16 peak");
  if (s.peak_mem_gib)
    h += card("Peak memory", fmt("%.2f", *s.peak_mem_gib) + " GiB",
              s.planned_mem_gib ? "planned " + fmt("%.2f", *s.planned_mem_gib) + " GiB" : std::string("host (not planned)"));
  h += card("Time", s.elapsed_s > 0 ? format_hms(s.elapsed_s) : "-", s.elapsed_s > 0 ? "training" : "not recorded");
  return h;
}

// The series of `more` after those of `into`, styled by `style`.
void append_series(std::vector<Series>& into, std::vector<Series> more, void (*style)(Series&)) {
  for (Series& s : more) {
    style(s);
    into.push_back(std::move(s));
  }
}

// DPO's charts, where a run logged TRL's metrics: the rewards of the chosen and rejected
// completions and their margin, and the reward accuracy; the evaluation's as markers.
std::string dpo_charts(const std::vector<Metrics>& runs) {
  std::vector<Series> rewards = series_of(runs, "rewards/chosen", "chosen", "#16a34a", &MetricsRow::rewards_chosen);
  if (rewards.empty()) return "";
  append_series(rewards, series_of(runs, "rewards/rejected", "rejected", "#dc2626", &MetricsRow::rewards_rejected),
                [](Series& s) { s.dashed = true; });
  append_series(rewards, series_of(runs, "rewards/margins", "margin", "#2563eb", &MetricsRow::rewards_margins),
                [](Series&) {});
  append_series(rewards,
                series_of(runs, "eval_rewards/margins", "eval margin", "#ea580c", &MetricsRow::eval_rewards_margins),
                [](Series& s) { s.markers = true; });
  std::vector<Series> accuracy =
      series_of(runs, "rewards/accuracies", "train", "#2563eb", &MetricsRow::rewards_accuracies, 100.0);
  append_series(accuracy, series_of(runs, "eval_rewards/accuracies", "eval", "#ea580c",
                                    &MetricsRow::eval_rewards_accuracies, 100.0),
                [](Series& s) { s.markers = true; });
  return chart("chart-rewards", "DPO rewards (beta x log-ratio to the reference)", "reward", rewards, false, "") +
         chart("chart-reward-accuracy", "DPO reward accuracy (chosen above rejected)", "pairs (%)", accuracy, true, "");
}

// The charts of the report, one per logged quantity (losses together, memory with its plan).
std::string report_charts(const std::vector<Metrics>& runs) {
  std::string h;
  std::vector<Series> losses = series_of(runs, "loss", "train loss", "#2563eb", &MetricsRow::loss);
  append_series(losses, series_of(runs, "eval_loss", "eval loss", "#ea580c", &MetricsRow::eval_loss),
                [](Series& s) { s.markers = true; });
  h += chart("chart-loss", "Loss", "loss", losses, false, "no loss logged");
  h += chart("chart-lr", "Learning rate", "learning rate",
             series_of(runs, "lr", "learning rate", "#16a34a", &MetricsRow::lr), true, "no learning rate logged");
  h += chart("chart-grad-norm", "Gradient norm (before clipping)", "norm",
             series_of(runs, "grad_norm", "gradient norm", "#9333ea", &MetricsRow::grad_norm), true,
             "no gradient norm logged");
  h += chart("chart-tokens-per-s", "Throughput", "tokens/s",
             series_of(runs, "tokens_per_s", "tokens/s", "#0891b2", &MetricsRow::tokens_per_s), true,
             "no throughput logged");
  h += chart("chart-mfu", "Model FLOPs utilisation", "MFU (%)",
             series_of(runs, "mfu", "MFU", "#db2777", &MetricsRow::mfu, 100.0), true, "no MFU: it is measured on GPUs");
  std::vector<Series> mem = series_of(runs, "peak_mem_gib", "peak", "#2563eb", &MetricsRow::peak_mem_gib);
  const size_t peaks = mem.size();
  append_series(mem, series_of(runs, "planned_mem_gib", "plan", "#64748b", &MetricsRow::planned_mem_gib),
                [](Series& s) { s.dashed = true; });
  h += chart("chart-memory",
             mem.size() == peaks ? "Peak memory (host; the plan covers GPUs)" : "Peak memory against the plan", "GiB",
             mem, true, "no memory logged");
  return h + dpo_charts(runs);
}

}  // namespace

std::string render_report_html(const std::vector<Metrics>& runs) {
  std::string sources, cards;
  int64_t logged = 0;
  for (size_t k = 0; k < runs.size(); ++k) {
    const Metrics& m = runs[k];
    if (k == 0 || m.source != runs[k - 1].source) sources += (sources.empty() ? "" : ", ") + m.source;
    const ReportSummary s = summarize(m);
    logged += s.logged;
    if (runs.size() > 1)
      cards += "<h3 class=\"run\">" + escape_html(m.label()) +
               (m.run_id.empty() ? "" : " &middot; " + escape_html(m.source)) + "</h3>";
    cards += "<section class=\"cards\">" + summary_cards(s) + "</section>\n";
  }
  // Several runs are counted; one run's resumes are resumes, not runs.
  const int resumes = runs.size() == 1 ? runs[0].runs - 1 : 0;
  const std::string what = runs.size() > 1 ? cat(" &middot; ", runs.size(), " runs")
                           : resumes == 1  ? std::string(" &middot; resumed once")
                           : resumes > 1   ? cat(" &middot; resumed ", resumes, " times")
                                           : std::string();
  std::string h = "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                  "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
                  "<title>anvil report: " + escape_html(sources) + "</title><style>" + kStyle +
                  "</style></head>\n<body>\n<header><h1>Training report</h1><p class=\"src\">" + escape_html(sources) +
                  what + "</p>" + kSmoothControl +
                  "</header>\n";
  h += cards;
  h += "<section class=\"grid\">\n";
  h += report_charts(runs);
  h += "</section>\n<footer>anvil report &middot; " + std::to_string(logged) +
       " logged steps &middot; hover a point for its value</footer>\n<script>" + kSmoothScript +
       "</script>\n</body></html>\n";
  return h;
}

}  // namespace anvil
