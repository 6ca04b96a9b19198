// Minimal leveled logging. Named TFR_LOG so it never collides with TensorFlow's LOG.
#pragma once
#include <sstream>

namespace tfring {

void SetLogLevel(int level);
int GetLogLevel();
void SetLogRank(int rank);
void EmitLog(int level, const std::string& msg);

}  // namespace tfring

#define TFR_LOG(level, stream_expr)              \
  do {                                           \
    if ((level) >= ::tfring::GetLogLevel()) {    \
      std::ostringstream _tfr_os;                \
      _tfr_os << stream_expr;                    \
      ::tfring::EmitLog((level), _tfr_os.str()); \
    }                                            \
  } while (0)

#define TFR_TRACE 0
#define TFR_DEBUG 1
#define TFR_INFO 2
#define TFR_WARNING 3
#define TFR_ERROR 4
