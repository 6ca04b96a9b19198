// The TensorFlow version this op library was compiled against (the core, shared by every binding, has none).
#ifndef TFRING_TF_VERSION
#define TFRING_TF_VERSION "unknown"
#endif

extern "C" {
const char* tfring_built_tf_version() { return TFRING_TF_VERSION; }
}
