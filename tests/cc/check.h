// A tiny test harness: the core's unit tests need no framework and no MPI.
#pragma once
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

struct TestCase {
  const char* name;
  std::function<void()> fn;
};
inline std::vector<TestCase>& Tests() {
  static std::vector<TestCase> t;
  return t;
}
inline int& Failures() {
  static int f = 0;
  return f;
}
struct Register {
  Register(const char* n, std::function<void()> f) { Tests().push_back({n, f}); }
};

#define TEST(name)                         \
  static void name();                      \
  static Register reg_##name(#name, name); \
  static void name()
#define EXPECT(cond)                                                                 \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "%s:%d: EXPECT failed: %s\n", __FILE__, __LINE__, #cond); \
      ++Failures();                                                                  \
    }                                                                                \
  } while (0)
#define EXPECT_EQ(a, b) EXPECT((a) == (b))
