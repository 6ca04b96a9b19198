// The one naming rule of every binding (names.h): unnamed collectives counted per (kind, set, scope), restarted per
// set or scope; a group's tensors suffixed "_<i>of<n>".
#include "../../tfring/cc/common/names.h"
#include "check.h"

using tfring::TensorNames;
using tfring::UnnamedCounts;

TEST(names_one_tensor_keeps_its_base_a_group_numbers_each) {
  EXPECT(TensorNames("allreduce.w", 1) == std::vector<std::string>{"allreduce.w"});
  EXPECT(TensorNames("g", 3) == (std::vector<std::string>{"g_1of3", "g_2of3", "g_3of3"}));
}

TEST(names_unnamed_count_per_kind_set_and_scope_and_restart_alike) {
  UnnamedCounts& c = UnnamedCounts::Get();
  c.RestartAll();
  EXPECT_EQ(c.Next("allreduce", 0), "allreduce.noname.1");
  EXPECT_EQ(c.Next("allreduce", 0), "allreduce.noname.2");
  EXPECT_EQ(c.Next("allgather", 0), "allgather.noname.1");             // each kind counts apart
  EXPECT_EQ(c.Next("allreduce", 1), "allreduce.noname.1");             // each set too
  EXPECT_EQ(c.Next("allreduce", 0, "trace.7"), "allreduce.noname.1");  // and each scope
  EXPECT_EQ(c.Next("allreduce", 0, "trace.7"), "allreduce.noname.2");
  c.RestartSet(0);  // a join on set 0: its counts restart in every scope, set 1's go on
  EXPECT_EQ(c.Next("allreduce", 0), "allreduce.noname.1");
  EXPECT_EQ(c.Next("allreduce", 0, "trace.7"), "allreduce.noname.1");
  EXPECT_EQ(c.Next("allreduce", 1), "allreduce.noname.2");
  const size_t before = c.size();
  c.ReleaseScope("trace.7");  // a freed trace leaves nothing behind
  EXPECT_EQ(c.size(), before - 1);
  c.RestartAll();
  EXPECT_EQ(c.size(), 0u);
  EXPECT_EQ(c.Next("allreduce", 1), "allreduce.noname.1");
  c.RestartAll();
}
