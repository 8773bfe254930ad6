# Builds only what splitbench runs: llama-server (host A) and ggml-rpc-server (host B),
# and the libraries they link. bootstrap.sh passes this file to llama.cpp's CMake as
# CMAKE_PROJECT_INCLUDE; CMake includes it after every project() call, and at the end
# of the top-level directory it takes every other target out of the default build (they
# stay defined: `cmake --build . --target llama-bench` still builds one by hand).
# The whole tree (two dozen tools) takes about twice as long to build on 2 cores.

if(NOT CMAKE_CURRENT_SOURCE_DIR STREQUAL CMAKE_SOURCE_DIR)
    return()  # a sub-project's project() call: the top level does the work
endif()

set(SPLITBENCH_TARGETS llama-server ggml-rpc-server)

function(splitbench_targets_under directory out)
    get_property(targets DIRECTORY "${directory}" PROPERTY BUILDSYSTEM_TARGETS)
    get_property(children DIRECTORY "${directory}" PROPERTY SUBDIRECTORIES)
    foreach(child IN LISTS children)
        splitbench_targets_under("${child}" below)
        list(APPEND targets ${below})
    endforeach()
    set(${out} ${targets} PARENT_SCOPE)
endfunction()

function(splitbench_only_what_runs)
    foreach(wanted IN LISTS SPLITBENCH_TARGETS)
        if(NOT TARGET ${wanted})
            message(FATAL_ERROR "splitbench: llama.cpp defines no target ${wanted} "
                                "(is -DGGML_RPC=ON set?)")
        endif()
    endforeach()
    splitbench_targets_under("${CMAKE_SOURCE_DIR}" targets)
    foreach(target IN LISTS targets)
        get_target_property(type ${target} TYPE)
        if(NOT target IN_LIST SPLITBENCH_TARGETS AND NOT type STREQUAL "INTERFACE_LIBRARY")
            # A library the two link is still built: a dependency of a target in the
            # default build is built with it.
            set_property(TARGET ${target} PROPERTY EXCLUDE_FROM_ALL TRUE)
        endif()
    endforeach()
    message(STATUS "splitbench: the default build makes ${SPLITBENCH_TARGETS} only")
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL splitbench_only_what_runs)
