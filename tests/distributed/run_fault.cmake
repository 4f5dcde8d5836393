# ctest driver of a fault test: runs COMMAND (a ;-list: mpirun ... fault MODE) with a 30 s
# timeout and passes only if the job ended by itself, with a non-zero exit code, and its output
# matches EXPECT (a regex).
#   cmake -DCOMMAND="mpirun;-np;2;./fault;throw" -DEXPECT="injected failure" -P run_fault.cmake
execute_process(COMMAND ${COMMAND} TIMEOUT 30 RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE out)
string(REPLACE ";" " " shown "${COMMAND}")
message("$ ${shown}\n${out}\n-> exit: ${result}")
if(NOT result MATCHES "^[0-9]+$")
  message(FATAL_ERROR "the job did not end by itself within 30 s (${result}): a failing rank left it hanging")
endif()
if(result EQUAL 0)
  message(FATAL_ERROR "the job exited with 0 although a rank failed")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "the output lacks /${EXPECT}/")
endif()
