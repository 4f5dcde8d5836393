# ctest driver (cmake -P) for the consumer project: configures, builds and runs it against xgrad.
#   MODE=subdirectory: the consumer adds XGRAD_SOURCE_DIR with add_subdirectory.
#   MODE=installed:    `cmake --install XGRAD_BINARY_DIR` into WORK_DIR/prefix, then the consumer
#                      finds it with find_package(xgrad) through CMAKE_PREFIX_PATH.
# Also expects: WORK_DIR, GENERATOR, CXX_COMPILER, BUILD_TYPE, XGRAD_SANITIZE, XGRAD_NATIVE; and
# optionally CONFIG_FLAGS_VAR / CONFIG_FLAGS (e.g. CMAKE_CXX_FLAGS_DEBUG and "-O1 -g1") and
# COMPILER_LAUNCHER, the parent tree's, so that the consumer compiles the library as it does.
cmake_minimum_required(VERSION 3.18)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result)
  if(NOT result EQUAL 0)
    string(REPLACE ";" " " command "${ARGN}")
    message(FATAL_ERROR "consumer (${MODE}): failed (${result}): ${command}")
  endif()
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(args -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=${BUILD_TYPE}
         -DXGRAD_CONSUMER_MODE=${MODE} -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON)
if(CONFIG_FLAGS_VAR AND NOT CONFIG_FLAGS STREQUAL "")
  list(APPEND args "-D${CONFIG_FLAGS_VAR}=${CONFIG_FLAGS}")
endif()
if(COMPILER_LAUNCHER)
  list(APPEND args "-DCMAKE_CXX_COMPILER_LAUNCHER=${COMPILER_LAUNCHER}")
endif()
if(MODE STREQUAL "subdirectory")
  list(APPEND args -DXGRAD_SOURCE_DIR=${XGRAD_SOURCE_DIR} -DXGRAD_SANITIZE=${XGRAD_SANITIZE}
                   -DXGRAD_NATIVE=${XGRAD_NATIVE})
elseif(MODE STREQUAL "installed")
  run(${CMAKE_COMMAND} --install ${XGRAD_BINARY_DIR} --prefix ${WORK_DIR}/prefix --config ${BUILD_TYPE})
  list(APPEND args -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
else()
  message(FATAL_ERROR "MODE must be subdirectory or installed, got '${MODE}'")
endif()

run(${CMAKE_COMMAND} -S ${CMAKE_CURRENT_LIST_DIR} -B ${WORK_DIR}/build ${args})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build --parallel 2)
run(${WORK_DIR}/build/consumer)
if(EXISTS ${WORK_DIR}/build/consumer_onnx)
  run(${WORK_DIR}/build/consumer_onnx ${WORK_DIR}/model.onnx)
endif()
