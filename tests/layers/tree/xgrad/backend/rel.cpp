// A relative include of a floor above.
#include "../core/tensor.hpp"
