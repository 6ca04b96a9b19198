#include "check.h"

int main() {
  for (auto& t : Tests()) {
    int before = Failures();
    t.fn();
    std::printf("%s %s\n", Failures() == before ? "PASS" : "FAIL", t.name);
  }
  std::printf("%zu tests, %d failed expectations\n", Tests().size(), Failures());
  return Failures() ? 1 : 0;
}
