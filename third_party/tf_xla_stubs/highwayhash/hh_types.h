// See arch_specific.h: declarations only.
#pragma once
#include "highwayhash/arch_specific.h"
