// A folder missing from the floors table.
#pragma once
