// The bulk float16/bfloat16 conversions (half.h: F16C where the CPU has it, branch-free bfloat16) give the same bits
// as the scalar conversions they replace, for every 16-bit value and for floats around every rounding case; and
// ScaleBuffer/DivideBuffer on 16-bit buffers equal the scalar rule element by element.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "../../tfring/cc/common/half.h"
#include "../../tfring/cc/common/ops/scale.h"
#include "check.h"

using namespace tfring;

namespace {

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

bool IsNan16(uint16_t h, bool bf16) { return bf16 ? (h & 0x7fff) > 0x7f80 : (h & 0x7fff) > 0x7c00; }

// Floats that exercise rounding: every 16-bit value widened, and the same plus and minus one ulp and half-way.
std::vector<float> Probes(bool bf16) {
  std::vector<float> out;
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = bf16 ? Bf16ToFloat(uint16_t(h)) : HalfToFloat(uint16_t(h));
    if (std::isnan(f)) continue;
    uint32_t b = Bits(f);
    for (uint32_t d : {0u, 1u, 0xfffu, 0x1000u, 0x1001u, 0x7fffu, 0x8000u, 0x8001u}) {
      uint32_t v = b + d;
      float g;
      std::memcpy(&g, &v, 4);
      if (!std::isnan(g)) out.push_back(g);
    }
  }
  out.push_back(65519.f), out.push_back(65520.f), out.push_back(1e-8f), out.push_back(-3e-8f);
  return out;
}

}  // namespace

TEST(HalfBulkConversionsMatchScalar) {
  for (bool bf16 : {false, true}) {
    std::vector<uint16_t> all(65536);
    for (uint32_t h = 0; h < 65536; ++h) all[h] = uint16_t(h);
    std::vector<float> wide(all.size());
    (bf16 ? Bf16sToFloats : HalvesToFloats)(all.data(), wide.data(), int64_t(all.size()));
    int bad = 0;
    for (uint32_t h = 0; h < 65536; ++h) {
      float want = bf16 ? Bf16ToFloat(uint16_t(h)) : HalfToFloat(uint16_t(h));
      if (std::isnan(want) ? !std::isnan(wide[h]) : Bits(want) != Bits(wide[h])) ++bad;
    }
    EXPECT_EQ(bad, 0);
    std::vector<float> probes = Probes(bf16);
    std::vector<uint16_t> narrow(probes.size());
    (bf16 ? FloatsToBf16s : FloatsToHalves)(probes.data(), narrow.data(), int64_t(probes.size()));
    bad = 0;
    for (size_t i = 0; i < probes.size(); ++i)
      if (narrow[i] != (bf16 ? FloatToBf16(probes[i]) : FloatToHalf(probes[i]))) ++bad;
    EXPECT_EQ(bad, 0);
    float nan = std::nanf("");
    uint16_t q;
    (bf16 ? FloatsToBf16s : FloatsToHalves)(&nan, &q, 1);
    EXPECT(IsNan16(q, bf16));
  }
}

TEST(HalfScaleAndDivideMatchScalar) {
  for (bool bf16 : {false, true}) {
    std::vector<uint16_t> data(1000 + 517);  // more than one block, and a tail
    for (size_t i = 0; i < data.size(); ++i) data[i] = uint16_t((i * 2654435761u) >> 7) & 0xfbff;  // no inf/nan
    std::vector<uint16_t> scaled = data, divided = data;
    ScaleBuffer(scaled.data(), int64_t(scaled.size()), bf16 ? DataType::BFLOAT16 : DataType::FLOAT16, 0.3);
    DivideBuffer(divided.data(), int64_t(divided.size()), bf16 ? DataType::BFLOAT16 : DataType::FLOAT16, 3);
    int bad = 0;
    for (size_t i = 0; i < data.size(); ++i) {
      float x = bf16 ? Bf16ToFloat(data[i]) : HalfToFloat(data[i]);
      uint16_t s = bf16 ? FloatToBf16(float(x * 0.3)) : FloatToHalf(float(x * 0.3));
      uint16_t d = bf16 ? FloatToBf16(x / 3.f) : FloatToHalf(x / 3.f);
      if (scaled[i] != s || divided[i] != d) ++bad;
    }
    EXPECT_EQ(bad, 0);
  }
}
