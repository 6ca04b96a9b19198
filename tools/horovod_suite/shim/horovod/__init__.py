"""Test-only shim: makes `horovod.*` imports in Horovod's published test files resolve to tfring.

Not part of tfring and never installed. Every module here forwards attribute lookups to a tfring module
(see _alias.forward); a name tfring lacks raises AttributeError naming the tfring module, so a missing
feature shows up as a test failure instead of being papered over. The only code that is not an alias is the
handful of test-scaffolding helpers Horovod's test files import from Horovod's own utilities
(util._executing_eagerly, common.util.is_version_greater_equal_than, runner.common.util.env.get_env_rank_and_size,
runner.util.threads.in_thread), written here from scratch.
"""
