# Runs PROGRAM (with the arguments in ARGS, if any, split as a shell would) and fails unless it
# exits with 0 and its output matches the regex EXPECT:
#   cmake -DPROGRAM=path/to/program "-DARGS=--dim 6" "-DEXPECT=regex" -P run_example.cmake
separate_arguments(args UNIX_COMMAND "${ARGS}")
execute_process(COMMAND ${PROGRAM} ${args} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} exited with ${status}")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "the output of ${PROGRAM} lacks \"${EXPECT}\"")
endif()
