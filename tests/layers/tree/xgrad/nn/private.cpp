// A module that reaches for the engine's access to Node's private fields, core's alone (nn is above
// core: only the privacy is broken).
#include <xgrad/core/engine_access.hpp>
#include <xgrad/core/graph.hpp>
