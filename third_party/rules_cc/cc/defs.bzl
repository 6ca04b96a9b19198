"""Offline stand-in for @rules_cc//cc:defs.bzl.

Bazel 4.2.3's own @bazel_tools//tools/cpp BUILD files load these symbols from @rules_cc, which Debian's
bazel-bootstrap would download (no distdir). They are thin aliases of the native rules, which is all
rules_cc 0.0.1 was for Bazel 4. Debian's bazel-rules-cc package is too new for Bazel 4.2.3.
"""

def cc_binary(**attrs):
    native.cc_binary(**attrs)

def cc_library(**attrs):
    native.cc_library(**attrs)

def cc_test(**attrs):
    native.cc_test(**attrs)

def cc_import(**attrs):
    native.cc_import(**attrs)

def cc_proto_library(**attrs):
    native.cc_proto_library(**attrs)

def cc_toolchain(**attrs):
    native.cc_toolchain(**attrs)

def cc_toolchain_suite(**attrs):
    native.cc_toolchain_suite(**attrs)

def objc_library(**attrs):
    native.objc_library(**attrs)
