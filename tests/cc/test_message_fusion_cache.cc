// Message codec, fusion planning, response cache, half conversions and scaling.
#include <cmath>
#include <cstring>

#include "../../tfring/cc/common/fusion.h"
#include "../../tfring/cc/common/half.h"
#include "../../tfring/cc/common/message.h"
#include "../../tfring/cc/common/ops/scale.h"
#include "../../tfring/cc/common/response_cache.h"
#include "check.h"

using namespace tfring;

static Response AllreduceResp(const std::string& name, int64_t n, DataType dt = DataType::FLOAT32) {
  Response r;
  r.op = OpType::ALLREDUCE;
  r.names = {name};
  r.dtype = dt;
  r.sizes = {n};
  r.shape = {n};
  return r;
}

TEST(RequestListRoundTrip) {
  RequestList l;
  l.shutdown = true;
  Request r;
  r.rank = 3;
  r.name = "grad/dense:0";
  r.op = OpType::ALLTOALL;
  r.dtype = DataType::BFLOAT16;
  r.reduce_op = ReduceOp::MAX;
  r.root_rank = 2;
  r.prescale = 0.5;
  r.postscale = 4;
  r.shape = {4, 0, 2};
  r.splits = {1, 3};
  l.requests = {r, Request()};
  RequestList back;
  EXPECT(Decode(Encode(l), &back).ok());
  EXPECT(back.shutdown);
  EXPECT_EQ(back.requests.size(), 2u);
  EXPECT(SameParameters(back.requests[0], r));
  EXPECT_EQ(back.requests[0].rank, 3);
  std::string truncated = Encode(l).substr(0, 10);
  EXPECT(!Decode(truncated, &back).ok());
}

TEST(ResponseListRoundTrip) {
  ResponseList l;
  l.cacheable = false;
  Response r = AllreduceResp("a", 7);
  r.kind = Response::ERROR;
  r.error = "boom";
  r.joined = 1;
  r.last_joined_rank = 2;
  r.names.push_back("b");
  l.responses = {r};
  ResponseList back;
  EXPECT(Decode(Encode(l), &back).ok());
  EXPECT(!back.cacheable);
  EXPECT_EQ(back.responses[0].error, "boom");
  EXPECT_EQ(back.responses[0].names.size(), 2u);
  EXPECT_EQ(back.responses[0].last_joined_rank, 2);
}

TEST(FusionRespectsThresholdAndCompatibility) {
  std::vector<Response> in = {AllreduceResp("a", 10), AllreduceResp("b", 10, DataType::FLOAT64), AllreduceResp("c", 10),
                              AllreduceResp("d", 100)};
  in[0].sizes = {10};
  // threshold 100 bytes: a(40)+c(40) fuse; b is another dtype; d (400) alone.
  auto out = PlanFusion(in, 100);
  EXPECT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].names.size(), 2u);
  EXPECT_EQ(out[0].names[1], "c");
  EXPECT_EQ(out[0].sizes.size(), 2u);
  EXPECT_EQ(out[1].names[0], "b");
  EXPECT_EQ(out[2].names[0], "d");
  EXPECT_EQ(PlanFusion(in, 0).size(), 4u);  // fusion disabled
  Response g = AllreduceResp("g", 1);
  g.op = OpType::ALLGATHER;
  EXPECT_EQ(PlanFusion({AllreduceResp("x", 1), g, AllreduceResp("y", 1)}, 1 << 20).size(), 2u);
  Response scaled = AllreduceResp("s", 1);
  scaled.prescale = 2;
  EXPECT_EQ(PlanFusion({AllreduceResp("x", 1), scaled}, 1 << 20).size(), 2u);
}

static Request Req(const std::string& name, Shape shape) {
  Request r;
  r.name = name;
  r.shape = shape;
  return r;
}

TEST(ResponseCacheHitInvalidEvict) {
  ResponseCache cache(2);
  uint32_t pos = 99;
  EXPECT(cache.Find(Req("a", {2}), &pos) == ResponseCache::Lookup::MISS);
  EXPECT_EQ(cache.Put(AllreduceResp("a", 2), Req("a", {2})), -1);
  EXPECT_EQ(cache.Put(AllreduceResp("b", 2), Req("b", {2})), -1);
  EXPECT(cache.Find(Req("a", {2}), &pos) == ResponseCache::Lookup::HIT);
  EXPECT_EQ(pos, 0u);
  EXPECT(cache.Find(Req("a", {3}), &pos) == ResponseCache::Lookup::INVALID);
  cache.Touch(0);  // a most recent: b is evicted next
  EXPECT_EQ(cache.Put(AllreduceResp("c", 2), Req("c", {2})), 1);
  EXPECT(cache.Find(Req("c", {2}), &pos) == ResponseCache::Lookup::HIT);
  EXPECT_EQ(pos, 1u);  // reused the freed position
  EXPECT(cache.Find(Req("b", {2}), &pos) == ResponseCache::Lookup::MISS);
  cache.Erase(0);
  EXPECT(cache.Find(Req("a", {2}), &pos) == ResponseCache::Lookup::MISS);
  EXPECT_EQ(cache.size(), 1u);
  ResponseCache off(0);
  EXPECT(!off.enabled());
}

TEST(HalfAndBf16Conversions) {
  // Values fp16 represents (normals, the smallest normal, subnormals down to the smallest) round-trip exactly:
  // a conversion that flushed subnormals to zero or lost a bit fails here.
  const float exact[] = {
      0.f, 1.f, -2.5f, 65504.f, 6.1035156e-05f, 5.9604645e-08f, 1.1920929e-07f, -3.0517578e-05f, 1.7881393e-07f};
  for (float v : exact) EXPECT_EQ(HalfToFloat(FloatToHalf(v)), v);
  EXPECT_EQ(FloatToHalf(5.9604645e-08f), 0x0001);  // the smallest subnormal, not zero
  // Others round to the nearest half (IEEE bit patterns).
  EXPECT_EQ(FloatToHalf(0.1f), 0x2e66);
  EXPECT_EQ(FloatToHalf(1e-3f), 0x1419);
  EXPECT_EQ(FloatToHalf(1.f + 1.f / 2048), 0x3c00);  // a tie rounds to even
  EXPECT_EQ(FloatToHalf(1.f), 0x3c00);
  EXPECT_EQ(FloatToHalf(70000.f), 0x7c00);  // overflow -> inf
  EXPECT(std::isnan(HalfToFloat(FloatToHalf(NAN))));
  EXPECT_EQ(FloatToBf16(1.f), 0x3f80);
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(3.f)), 3.f);
}

TEST(ScaleBufferByDtype) {
  int32_t ints[3] = {5, -5, 7};
  ScaleBuffer(ints, 3, DataType::INT32, 0.5);
  EXPECT(ints[0] == 2 && ints[1] == -2 && ints[2] == 3);  // truncation toward zero
  float f[2] = {1.f, 3.f};
  ScaleBuffer(f, 2, DataType::FLOAT32, 0.5);
  EXPECT(f[0] == 0.5f && f[1] == 1.5f);
  uint16_t h[1] = {FloatToHalf(3.f)};
  ScaleBuffer(h, 1, DataType::FLOAT16, 0.5);
  EXPECT_EQ(HalfToFloat(h[0]), 1.5f);
}
