// Stand-in for highwayhash, which TensorFlow's pip headers include (xla/printer.h) but do not ship. tfring
// only needs the declarations to compile against the XLA builder; it never hashes (HighwayHashPrinter unused).
#pragma once
#define HH_TARGET_PREFERRED 0
