# Runs PROGRAM and fails unless it exits with 0 and its output matches the regex EXPECT:
#   cmake -DPROGRAM=path/to/program "-DEXPECT=regex" -P run_example.cmake
execute_process(COMMAND ${PROGRAM} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} exited with ${status}")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "the output of ${PROGRAM} lacks \"${EXPECT}\"")
endif()
