// anvil report: a metrics file written by a run and its resume (appending to the file) is
// read with the later lines winning; the summary's figures; the HTML rendered by headless
// Chromium (--dump-dom) holds every chart with each of its data points. Runs with headers
// (two in one file, one in another) are each their own series, in the DOM and in a
// screenshot, and the smoothing slider draws TensorBoard's debiased moving average. A DPO run's
// rewards and reward accuracy are charted. Without
// Chromium the rendering tests are skipped with the reason, or fail under CI=true.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <regex>
#include <sstream>

#include "core/fs.h"
#include "core/json.h"
#include "report/report.h"
#include "testing.h"

namespace anvil {
namespace {

// 40 steps of a first run (eval every 10), then a resume from step 30 to 50 (eval at 40, 50)
// whose elapsed time restarts: 50 steps, 5 eval points, 20 + 10 seconds.
struct Fixture {
  std::string dir, file;
  Fixture() : dir(testing::temp_dir("report")), file(dir + "/metrics.jsonl") {
    std::ofstream out(file);
    auto line = [&](int step, double elapsed, bool resumed) {
      const double loss = 3.0 * std::exp(-step / 20.0) + 0.5 + (resumed ? 0.001 : 0.0);
      out << "{\"step\":" << step << ",\"loss\":" << loss << ",\"grad_norm\":" << 1.0 / step << ",\"lr\":"
          << 1e-5 * std::min(1.0, step / 5.0) << ",\"tokens_per_s\":" << (step <= 10 ? 1000 : 2000 + step)
          << ",\"mfu\":" << 0.4 << ",\"peak_mem_gib\":" << 30.5 << ",\"planned_mem_gib\":" << 32.25
          << ",\"elapsed_s\":" << elapsed;
      if (step % 10 == 0) out << ",\"eval_loss\":" << loss + 0.2;
      out << "}\n";
    };
    for (int s = 1; s <= 40; ++s) line(s, s * 0.5, false);
    for (int s = 31; s <= 50; ++s) line(s, (s - 30) * 0.5, true);
  }
};

TEST(Report, ReadsResumedFilesAndSummarizes) {
  const Fixture f;
  const std::vector<Metrics> runs = read_metrics(f.file);
  ASSERT_EQ(runs.size(), 1u) << "a file without headers holds one run";
  const Metrics& m = runs[0];
  ASSERT_EQ(m.rows.size(), 50u);
  EXPECT_EQ(m.runs, 2);
  EXPECT_DOUBLE_EQ(m.elapsed_s, 30.0);
  EXPECT_NEAR(*m.rows[34].loss, 3.0 * std::exp(-35 / 20.0) + 0.501, 1e-5);  // the resumed run's line wins
  const ReportSummary s = summarize(m);
  EXPECT_EQ(s.last_step, 50);
  EXPECT_NEAR(*s.final_loss, 3.0 * std::exp(-2.5) + 0.501, 1e-5);
  EXPECT_EQ(s.best_loss_step, 50);
  EXPECT_EQ(s.best_eval_step, 50);
  double tps = 0;
  for (int step = 11; step <= 50; ++step) tps += 2000 + step;
  EXPECT_NEAR(*s.mean_tokens_per_s, tps / 40, 1e-9);  // the first 10 steps are not timed
  EXPECT_NEAR(*s.mean_mfu, 0.4, 1e-12);
  const std::string t = summary_text(s);
  EXPECT_NE(t.find("steps       1 to 50 (50 logged)"), std::string::npos) << t;
  EXPECT_NE(t.find("time        0:00:30"), std::string::npos) << t;
  EXPECT_NE(t.find("MFU 40.0%"), std::string::npos) << t;

  auto r = testing::run_anvil({"report", f.file});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("wrote " + f.dir + "/metrics.html"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("eval loss   final"), std::string::npos) << r.out;
  const std::string page = read_file(f.dir + "/metrics.html");
  EXPECT_NE(page.find("resumed once"), std::string::npos) << "one run resumed once";
  EXPECT_EQ(page.find(" runs</p>"), std::string::npos) << "one run resumed is not several runs";

  std::ofstream(f.dir + "/bad.jsonl") << "{\"step\":1,\"loss\":2}\n{\"loss\":2}\n";
  r = testing::run_anvil({"report", f.dir + "/bad.jsonl"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("bad.jsonl:2: expected a JSON object with an integer \"step\""), std::string::npos) << r.out;
}

std::string find_chromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    const auto r = testing::run_command(std::string("command -v ") + name);
    if (r.exit_code == 0 && !r.out.empty()) return r.out.substr(0, r.out.find('\n'));
  }
  return "";
}

// The tests that render the page: skipped (or failed under CI=true) without Chromium.
class ReportInChromium : public ::testing::Test {
 protected:
  void SetUp() override {
    chromium = find_chromium();
    if (chromium.empty())
      ANVIL_SKIP_UNLESS_REQUIRED(testing::in_ci(), "chromium is not installed (CI=true needs it): apt-get install "
                                                   "chromium (tools/setup.sh does)");
  }
  std::string chromium;
};

TEST_F(ReportInChromium, RendersEveryChartWithItsPoints) {
  const Fixture f;
  const std::string html = f.dir + "/report.html";
  auto r = testing::run_anvil({"report", f.file, "--out", html});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string page = read_file(html);
  EXPECT_EQ(page.find("<script src"), std::string::npos);
  EXPECT_EQ(page.find("http"), std::string::npos) << "the page fetches nothing";

  const auto dom = testing::run_command("(timeout 120 '" + chromium + "' --headless --no-sandbox --disable-gpu " +
                                        "--user-data-dir='" + f.dir + "/profile' --dump-dom 'file://" + html +
                                        "' 2>/dev/null)");
  ASSERT_EQ(dom.exit_code, 0) << dom.out;
  ASSERT_NE(dom.out.find("Training report"), std::string::npos) << dom.out.substr(0, 2000);
  struct Want {
    const char* chart;
    const char* series;
    size_t points;
  };
  for (const Want& w : {Want{"chart-loss", "loss", 50}, Want{"chart-loss", "eval_loss", 5}, Want{"chart-lr", "lr", 50},
                        Want{"chart-grad-norm", "grad_norm", 50}, Want{"chart-tokens-per-s", "tokens_per_s", 50},
                        Want{"chart-mfu", "mfu", 50}, Want{"chart-memory", "peak_mem_gib", 50},
                        Want{"chart-memory", "planned_mem_gib", 50}}) {
    const size_t at = dom.out.find(std::string("id=\"") + w.chart + "\"");
    ASSERT_NE(at, std::string::npos) << w.chart;
    const std::string fig = dom.out.substr(at, dom.out.find("</figure>", at) - at);
    std::smatch g;
    const std::regex series(std::string("<g class=\"series\" data-series=\"") + w.series +
                            "\" data-count=\"(\\d+)\"[^>]*><polyline[^>]* points=\"([^\"]*)\"");
    ASSERT_TRUE(std::regex_search(fig, g, series)) << w.chart << " " << w.series;
    EXPECT_EQ(std::stoul(g[1].str()), w.points) << w.series;
    const std::string pts = g[2].str();
    size_t n = 0;
    const std::regex pair("[-0-9.]+,[-0-9.]+");
    for (auto it = std::sregex_iterator(pts.begin(), pts.end(), pair);
         it != std::sregex_iterator(); ++it)
      ++n;
    EXPECT_EQ(n, w.points) << w.chart << " " << w.series << " polyline";
    // Each point also carries its value as a tooltip.
    const std::string label = std::string(w.series) == "loss" ? "train loss at step " : "";
    if (!label.empty()) {
      size_t tips = 0;
      for (size_t p = fig.find(label); p != std::string::npos; p = fig.find(label, p + 1)) ++tips;
      EXPECT_EQ(tips, w.points);
    }
  }
  EXPECT_NE(dom.out.find("train loss at step 50: 0.7473"), std::string::npos);
}

// The records' mean_tokens_per_s (the train log's "done" figure: tokens over step time) is the
// report's, not the mean of the logged steps' figures; the MFU follows it.
TEST(Report, TokensPerSecondIsTheTrainLogs) {
  const std::string file = testing::temp_dir("report-tps") + "/m.jsonl";
  {
    std::ofstream out(file);
    out << "{\"run_id\":\"t\"}\n";
    for (int s = 1; s <= 20; ++s)
      out << "{\"step\":" << s << ",\"loss\":2,\"tokens_per_s\":" << 1000 + 50 * s << ",\"mfu\":"
          << (1000 + 50 * s) * 1e-5 << ",\"mean_tokens_per_s\":" << (s <= 10 ? 0 : 1234.4) << "}\n";
  }
  const ReportSummary s = summarize(read_metrics(file)[0]);
  EXPECT_DOUBLE_EQ(*s.mean_tokens_per_s, 1234.4);
  EXPECT_NEAR(*s.mean_mfu, 1234.4e-5, 1e-12);
  const std::string t = summary_text(s);
  EXPECT_NE(t.find("tokens/s    1,234, MFU 1.2% (tokens over step time, first 10 steps excluded, as the train log)"),
            std::string::npos) << t;
}

// A DPO run (--objective dpo: TRL's metrics in its records, an evaluation every 5 steps) gets
// its rewards and reward accuracy charted, each logged value a point; an SFT run gets neither.
TEST(Report, DpoRunsChartTheirRewards) {
  const std::string dir = testing::temp_dir("report-dpo");
  {
    std::ofstream out(dir + "/dpo.jsonl");
    out << "{\"run_id\":\"d\"}\n";
    for (int s = 1; s <= 20; ++s) {
      out << "{\"step\":" << s << ",\"loss\":" << 0.69 - 0.01 * s << ",\"rewards/chosen\":" << 0.05 * s
          << ",\"rewards/rejected\":" << -0.03 * s << ",\"rewards/margins\":" << 0.08 * s
          << ",\"rewards/accuracies\":" << (s > 1 ? 0.75 : 0.0);
      if (s % 5 == 0)
        out << ",\"eval_loss\":0.6,\"eval_rewards/margins\":" << 0.07 * s << ",\"eval_rewards/accuracies\":0.5";
      out << "}\n";
    }
  }
  const std::string html = render_report_html(read_metrics(dir + "/dpo.jsonl"));
  for (const char* id : {"chart-rewards", "chart-reward-accuracy"})
    EXPECT_NE(html.find(std::string("id=\"") + id + "\""), std::string::npos) << id;
  for (const char* series : {"rewards/chosen\" data-count=\"20\"", "rewards/rejected\" data-count=\"20\"",
                             "rewards/margins\" data-count=\"20\"", "eval_rewards/margins\" data-count=\"4\"",
                             "rewards/accuracies\" data-count=\"20\"", "eval_rewards/accuracies\" data-count=\"4\""})
    EXPECT_NE(html.find(std::string("data-series=\"") + series), std::string::npos) << series;
  const Fixture sft;
  EXPECT_EQ(render_report_html(read_metrics(sft.file)).find("chart-rewards"), std::string::npos);
}

// Runs with headers: runs.jsonl holds run "a" (30 steps) and run "b" (20 steps); other.jsonl
// holds run "c" (25 steps). No eval loss: orange (run b's colour) appears only in b's lines.
struct TwoFiles {
  std::string dir, runs, other;
  TwoFiles() : dir(testing::temp_dir("report-runs")), runs(dir + "/runs.jsonl"), other(dir + "/other.jsonl") {
    auto write_run = [](std::ofstream& out, const std::string& id, int steps, double floor) {
      out << "{\"run_id\":\"" << id << "\",\"model\":\"preset tiny\",\"config\":{\"seed\":0}}\n";
      for (int s = 1; s <= steps; ++s)
        out << "{\"step\":" << s << ",\"loss\":" << 3.0 * std::exp(-s / 8.0) + floor + 0.05 * (s % 3)
            << ",\"lr\":1e-4,\"run_id\":\"" << id << "\"}\n";
    };
    std::ofstream a(runs), c(other);
    write_run(a, "a", 30, 0.5);
    write_run(a, "b", 20, 1.0);
    write_run(c, "c", 25, 1.5);
  }
};

TEST(Report, RunsWithHeadersAreTheirOwnSeries) {
  const TwoFiles f;
  const std::vector<Metrics> runs = read_metrics(f.runs);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].run_id, "a");
  EXPECT_EQ(runs[0].rows.size(), 30u);
  EXPECT_EQ(runs[1].run_id, "b");
  EXPECT_EQ(runs[1].rows.size(), 20u);
  const auto r = testing::run_anvil({"report", f.runs, f.other, "--out", f.dir + "/page.html"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("run a (" + f.runs + ")\nsteps       1 to 30 (30 logged)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("run c (" + f.other + ")\nsteps       1 to 25 (25 logged)"), std::string::npos) << r.out;
}

// The loss chart's polyline of run `run` in a dumped DOM: its points as (x, y).
std::vector<std::pair<double, double>> loss_line(const std::string& dom, const std::string& run) {
  const size_t at = dom.find("id=\"chart-loss\"");
  const std::string fig = dom.substr(at, dom.find("</figure>", at) - at);
  std::smatch g;
  const std::regex series("<g class=\"series\" data-series=\"loss\" data-count=\"\\d+\" data-run=\"" + run +
                          "\"><polyline[^>]* points=\"([^\"]*)\"");
  if (!std::regex_search(fig, g, series)) return {};
  std::vector<std::pair<double, double>> out;
  std::istringstream in(g[1].str());
  for (std::string p; in >> p;) out.emplace_back(std::stod(p), std::stod(p.substr(p.find(',') + 1)));
  return out;
}

TEST_F(ReportInChromium, DrawsEachRunAsItsOwnSeriesAndSmooths) {
  const TwoFiles f;
  const std::string html = f.dir + "/page.html";
  ASSERT_EQ(testing::run_anvil({"report", f.runs, f.other, "--out", html}).exit_code, 0);
  auto browse = [&](const std::string& what, const std::string& address) {
    return testing::run_command("(timeout 120 '" + chromium + "' --headless --no-sandbox --disable-gpu " +
                                "--user-data-dir='" + f.dir + "/profile' " + what + " '" + address + "' 2>/dev/null)");
  };
  const auto dom = browse("--dump-dom", "file://" + html);
  ASSERT_EQ(dom.exit_code, 0) << dom.out;
  const std::vector<std::pair<std::string, size_t>> want = {{"run a", 30}, {"run b", 20}, {"run c", 25}};
  for (const auto& [run, points] : want) EXPECT_EQ(loss_line(dom.out, run).size(), points) << run;

  // The screenshot shows run a's line in blue and run b's in orange.
  const std::string shot = f.dir + "/page.png";
  ASSERT_EQ(browse("--window-size=1280,1400 --screenshot='" + shot + "'", "file://" + html).exit_code, 0);
  const auto colors = testing::run_command("python3 " + testing::shell_quote(testing::oracle_script("png_colors.py")) +
                                           " " +
                                           testing::shell_quote(shot) + " 2563eb ea580c");
  ASSERT_EQ(colors.exit_code, 0) << colors.out;
  const Json px = Json::parse(colors.out);
  EXPECT_GT(px["2563eb"].get<int>(), 200) << colors.out;
  EXPECT_GT(px["ea580c"].get<int>(), 200) << "run b's series is drawn: " << colors.out;

  // "#smooth=0.6": each point is the debiased EMA of the raw ones (TensorBoard's smoothing).
  const auto smoothed = browse("--dump-dom", "file://" + html + "#smooth=0.6");
  ASSERT_EQ(smoothed.exit_code, 0);
  const auto raw = loss_line(dom.out, "run a"), ema = loss_line(smoothed.out, "run a");
  ASSERT_EQ(ema.size(), raw.size());
  double last = 0, w = 0.6, moved = 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    last = last * w + (1 - w) * raw[i].second;
    EXPECT_NEAR(ema[i].second, last / (1 - std::pow(w, static_cast<double>(i + 1))), 0.02) << i;
    EXPECT_EQ(ema[i].first, raw[i].first);
    moved = std::max(moved, std::abs(ema[i].second - raw[i].second));
  }
  EXPECT_GT(moved, 1.0) << "the smoothed line differs from the raw one";
}

}  // namespace
}  // namespace anvil
