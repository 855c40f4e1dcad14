# How every module is made (one folder = one module = one target), and what it may see.
#
#   runledger_module(NAME [EXECUTABLE exe] SOURCES files... [DEPS deps...] [PRIVATE_DEPS deps...])
#     The folder's library runledger_NAME (or, for an application such as cli/, the executable
#     `exe`). Its public header is <folder>/<leaf of folder>.h; every other header in the folder
#     is private to it. An executable has no public header. DEPS are what the public header needs
#     (PUBLIC), PRIVATE_DEPS what only the sources need. A dependency without "::" names a module
#     (pg -> runledger_pg); one with "::" is an imported target (spdlog::spdlog).
#   runledger_module_test(NAME MODULE module SOURCES files... [LIBS deps...] [TIMEOUT s])
#     (tests/) One Catch2 executable of the module's tests; each TEST_CASE is its own ctest test.
#   runledger_module_bench(NAME MODULE module SOURCES files... [LIBS deps...])
#     (bench/) The module's benchmark executable.
#   runledger_fuzz_target(NAME SOURCES files... LIBS deps... CORPUS dir)
#     (fuzz/CMakeLists.txt, built only with RUNLEDGER_FUZZ and clang) A libFuzzer executable.
#
# What the build checks (checks/module_boundaries.py, a ctest test, reading the manifest these
# functions write to <build>/modules.json): a module's files include only its own headers and the
# public headers of modules it depends on (directly or through them); anything else includes only
# public headers, except a module's own tests and benchmark, which may include its private headers
# when the include says why with a `// private: ...` comment.

set_property(GLOBAL PROPERTY RUNLEDGER_MANIFEST "")

function(_runledger_deps out)
  set(result "")
  foreach(dep IN LISTS ARGN)
    if(dep MATCHES "::")
      list(APPEND result ${dep})
    else()
      list(APPEND result runledger_${dep})
    endif()
  endforeach()
  set(${out} ${result} PARENT_SCOPE)
endfunction()

# One JSON object per target: {"kind", "name", "module", "dir", "sources", "deps"}.
function(_runledger_record kind name module)
  cmake_parse_arguments(R "" "" "SOURCES;DEPS" ${ARGN})
  file(RELATIVE_PATH dir ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  set(sources "")
  foreach(source IN LISTS R_SOURCES)
    get_filename_component(absolute ${source} ABSOLUTE BASE_DIR ${CMAKE_CURRENT_SOURCE_DIR})
    file(RELATIVE_PATH relative ${CMAKE_SOURCE_DIR} ${absolute})
    list(APPEND sources "\"${relative}\"")
  endforeach()
  set(deps "")
  foreach(dep IN LISTS R_DEPS)
    if(NOT dep MATCHES "::")
      list(APPEND deps "\"${dep}\"")
    endif()
  endforeach()
  list(JOIN sources ", " sources)
  list(JOIN deps ", " deps)
  set_property(GLOBAL APPEND PROPERTY RUNLEDGER_MANIFEST
    "{\"kind\": \"${kind}\", \"name\": \"${name}\", \"module\": \"${module}\", \"dir\": \"${dir}\", \"sources\": [${sources}], \"deps\": [${deps}]}")
endfunction()

function(runledger_module name)
  cmake_parse_arguments(M "" "EXECUTABLE" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  if(M_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "runledger_module(${name}): unexpected ${M_UNPARSED_ARGUMENTS}")
  endif()
  if(M_EXECUTABLE)
    set(target ${M_EXECUTABLE})
    add_executable(${target} ${M_SOURCES})
    set(kind application)
  else()
    set(target runledger_${name})
    add_library(${target} ${M_SOURCES})
    set(kind module)
  endif()
  _runledger_deps(public ${M_DEPS})
  _runledger_deps(private ${M_PRIVATE_DEPS})
  target_link_libraries(${target} PUBLIC ${public} PRIVATE ${private})
  _runledger_record(${kind} ${name} ${name} SOURCES ${M_SOURCES} DEPS ${M_DEPS} ${M_PRIVATE_DEPS})
endfunction()

function(runledger_module_test name)
  cmake_parse_arguments(T "" "MODULE;TIMEOUT" "SOURCES;LIBS" ${ARGN})
  if(NOT T_MODULE OR T_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "runledger_module_test(${name}): needs MODULE and SOURCES only")
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  add_executable(${name} ${T_SOURCES})
  _runledger_deps(libs ${T_LIBS})
  target_link_libraries(${name} PRIVATE runledger_catch_main runledger_test_support ${libs})
  catch_discover_tests(${name} TEST_PREFIX "${name}: "
    PROPERTIES TIMEOUT ${T_TIMEOUT}
               ENVIRONMENT "LSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/tests/lsan.supp")
  _runledger_record(test ${name} ${T_MODULE} SOURCES ${T_SOURCES} DEPS ${T_LIBS})
endfunction()

function(runledger_module_bench name)
  cmake_parse_arguments(B "" "MODULE" "SOURCES;LIBS" ${ARGN})
  if(NOT B_MODULE OR B_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "runledger_module_bench(${name}): needs MODULE and SOURCES only")
  endif()
  add_executable(${name} ${B_SOURCES})
  _runledger_deps(libs ${B_LIBS})
  target_link_libraries(${name} PRIVATE ${libs})
  _runledger_record(bench ${name} ${B_MODULE} SOURCES ${B_SOURCES} DEPS ${B_LIBS})
endfunction()

# Writes <build>/modules.json once every folder has been added.
function(runledger_write_manifest)
  get_property(entries GLOBAL PROPERTY RUNLEDGER_MANIFEST)
  list(JOIN entries ",\n  " body)
  file(WRITE ${CMAKE_BINARY_DIR}/modules.json.new "[\n  ${body}\n]\n")
  file(COPY_FILE ${CMAKE_BINARY_DIR}/modules.json.new ${CMAKE_BINARY_DIR}/modules.json
       ONLY_IF_DIFFERENT)
endfunction()
