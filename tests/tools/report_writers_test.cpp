// The report formats on a hand-made report.
#include "tools/report_writers.hpp"
#include "tools/timeline_writer.hpp"

#include <gtest/gtest.h>

#include <sstream>

namespace memweave {
namespace {

run_report sample() {
  run_report r;
  r.command = "plan";
  r.network = "net \"x\"";
  r.batch = 4;
  policy_report p;
  p.policy = "liveness";
  p.peak_bytes = 3072;
  p.losses = {2.5, 1.25};
  p.steps = {{1, "data", 'F', 1000, 1024, 2, 0, ""},
             {2, "conv1", 'F', 3000, 3072, 4, 512, "direct", 2, 0, 1, 4, 2, true}};
  r.policies.push_back(p);
  return r;
}

TEST(report_writers_test, json_escapes_strings_and_keeps_field_names) {
  std::ostringstream out;
  write_json(out, sample());
  const std::string j = out.str();
  EXPECT_NE(j.find("\"network\": \"net \\\"x\\\"\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"losses\": [2.5, 1.25]"), std::string::npos) << j;
  EXPECT_NE(j.find("{\"step\": 2, \"layer\": \"conv1\", \"pass\": \"F\", \"bytes_live\": 3000, "
                   "\"heap_bytes\": 3072, \"tensors_live\": 4, \"workspace_bytes\": 512, "
                   "\"algorithm\": \"direct\", \"offloads\": 2, \"prefetches\": 0, \"replays\": 1, "
                   "\"parts\": 4, \"groups\": 2, \"staged\": true}"),
            std::string::npos)
      << j;
}

// A layer named by a model file with bytes that are not UTF-8: U+FFFD in their place, valid
// UTF-8 (here "é", "€", "😀") as it is (session 42's hostile run: the --json file no JSON reader
// took).
TEST(report_writers_test, json_writes_bytes_that_are_not_utf8_as_the_replacement_character) {
  run_report r = sample();
  r.policies[0].steps[1].layer =
      "a\xff\xfe\x80"
      "b \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 \xed\xa0\x80 \xc3";
  std::ostringstream out;
  write_json(out, r);
  const std::string j = out.str();
  EXPECT_NE(j.find("\"layer\": \"a\\ufffd\\ufffd\\ufffdb \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 "
                   "\\ufffd\\ufffd\\ufffd \\ufffd\""),
            std::string::npos)
      << j;
}

// A review: where the fewest split plan did not run to the end (host memory ran out), the
// summary said it "runs 0 ms per iteration".
TEST(report_writers_test, a_fewest_split_plan_that_did_not_fit_is_said_so) {
  run_report r = sample();
  policy_report& p = r.policies[0];
  p.fits = true;
  p.weighed_split_share = 0.55;
  p.weighed_split_steps = 109;
  p.fewest_split_steps = 106;
  for (const double fewest_s : {0.0, 0.25}) {
    p.weighed_fewest_split_seconds = fewest_s;
    std::ostringstream out;
    write_summary(out, r);
    EXPECT_NE(out.str().find(fewest_s == 0 ? "against 106 with the fewest, which does not fit)"
                                           : "against 106 with the fewest, which runs 250 ms"),
              std::string::npos)
        << out.str();
  }
}

// Seen on an H200: a loss of 5.3e11 (VGG-16 going wrong at lr 0.01), printed fixed, ran
// into the img/s column ("620.9530524747263.97974"). The columns stay apart at any loss.
TEST(report_writers_test, the_summary_keeps_img_s_and_a_huge_loss_apart) {
  run_report r = sample();
  r.command = "train";
  policy_report& p = r.policies[0];
  p.images_per_s = 620.95;
  for (const double loss : {6.94034, 530524747263.97974, -2.5e9}) {
    p.losses = {loss};
    std::ostringstream out;
    write_summary(out, r);
    const std::string s = out.str();
    EXPECT_NE(s.find("     621.0 "), std::string::npos) << s;
    EXPECT_NE(s.find(loss == 6.94034 ? "     6.94034"
                     : loss > 0      ? "  5.3052e+11"
                                     : " -2.5000e+09"),
              std::string::npos)
        << s;
  }
}

TEST(report_writers_test, csv_has_one_row_per_policy_and_step) {
  std::ostringstream out;
  write_csv(out, sample());
  EXPECT_EQ(out.str(),
            "policy,step,layer,pass,bytes_live,heap_bytes,tensors_live,workspace_bytes,algorithm,"
            "offloads,prefetches,replays,parts,groups,staged\n"
            "liveness,1,data,F,1000,1024,2,0,,0,0,0,1,1,0\n"
            "liveness,2,conv1,F,3000,3072,4,512,direct,2,0,1,4,2,1\n");
}

// An ONNX model's layer names may hold commas, quotes and line breaks: quoted, each quote
// doubled (RFC 4180), the rows stay rows (they were cut at every comma and line break).
TEST(report_writers_test, csv_quotes_names_that_hold_commas_quotes_or_line_breaks) {
  run_report r = sample();
  r.policies[0].steps[0].layer = "evil,name\"q\nnew";
  r.policies[0].steps[1].layer = "plain";
  std::ostringstream out;
  write_csv(out, r);
  EXPECT_EQ(out.str(),
            "policy,step,layer,pass,bytes_live,heap_bytes,tensors_live,workspace_bytes,algorithm,"
            "offloads,prefetches,replays,parts,groups,staged\n"
            "liveness,1,\"evil,name\"\"q\nnew\",F,1000,1024,2,0,,0,0,0,1,1,0\n"
            "liveness,2,plain,F,3000,3072,4,512,direct,2,0,1,4,2,1\n");
}

TEST(report_writers_test, svg_draws_one_curve_per_policy_and_panel) {
  run_report r = sample();
  r.policies.push_back(r.policies[0]);
  r.policies[1].policy = "baseline";
  std::ostringstream out;
  write_svg(out, r);
  const std::string s = out.str();
  std::size_t curves = 0;
  for (auto at = s.find("<polyline"); at != std::string::npos; at = s.find("<polyline", at + 1))
    ++curves;
  EXPECT_EQ(curves, 6u);  // 2 policies x (memory, tensors, workspace)
  // The schedule's marks: step 2 of each policy copied out and replayed, copied nothing back.
  auto count = [&](const std::string& what) {
    std::size_t n = 0;
    for (auto at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("class=\"offload\""), 2u);
  EXPECT_EQ(count("class=\"prefetch\""), 0u);
  EXPECT_EQ(count("class=\"replay\""), 2u);
  EXPECT_NE(s.find("marks: "), std::string::npos);
  EXPECT_NE(s.find("liveness (peak 3.00 KiB)"), std::string::npos) << s;
  EXPECT_NE(s.find("baseline (peak 3.00 KiB)"), std::string::npos) << s;
}

TEST(report_writers_test, timeline_trace_has_a_track_per_stream_and_marks_hidden_copies) {
  std::vector<timeline_span> spans = {
      {stream_role::compute, "conv1 F", "kernel", 0.0, 0.002, 0, 1},
      {stream_role::device_to_host, "conv1 \"out\"", "offload", 0.001, 0.003, 4096, -1},
      {stream_role::compute, "relu1 F", "kernel", 0.004, 0.005, 0, 2},
      {stream_role::host_to_device, "conv1 out", "prefetch", 0.004, 0.005, 4096, -1}};
  EXPECT_DOUBLE_EQ(overlap_with_compute(spans[1], spans), 0.5);
  EXPECT_DOUBLE_EQ(overlap_with_compute(spans[3], spans), 1.0);
  std::ostringstream out;
  write_timeline_trace(out, spans, "resnet50 b64 all");
  const std::string j = out.str();
  EXPECT_NE(j.find("\"traceEvents\": ["), std::string::npos) << j;
  EXPECT_NE(j.find("\"args\": {\"name\": \"device_to_host\"}"), std::string::npos) << j;
  EXPECT_NE(j.find("{\"name\": \"conv1 F\", \"cat\": \"kernel\", \"ph\": \"X\", \"pid\": 1, "
                   "\"tid\": 1, \"ts\": 0, \"dur\": 2000, \"args\": {\"step\": 1}}"),
            std::string::npos)
      << j;
  EXPECT_NE(j.find("\"name\": \"conv1 \\\"out\\\"\", \"cat\": \"offload\""), std::string::npos)
      << j;
  EXPECT_NE(j.find("\"bytes\": 4096, \"overlap_with_compute\": 0.5}"), std::string::npos) << j;
}

}  // namespace
}  // namespace memweave
