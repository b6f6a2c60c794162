# `ulimit -f` below what the run's heap trace needs: the trace's write fails (EFBIG) and costs
# only the trace; the report is written and the run exits 2 naming it. SIGXFSZ killed the run
# before (exit 153 from a shell) with the report unwritten (session 45's hostile run).
file(REMOVE ${OUT}/file_size_limit.json ${OUT}/file_size_limit.trace)
execute_process(
  COMMAND bash -c "ulimit -f 48 && MEMWEAVE_TRACE=${OUT}/file_size_limit.trace exec \"$0\" \"$@\""
          ${MEMWEAVE} train --net resnet:1,1,1,1 --width 0.0625 --classes 5 --image-side 32
          --batch 4 --device host --conv-ws fixed:direct --iterations 6 --policy liveness
          --json ${OUT}/file_size_limit.json
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "memweave past the file size limit exited '${rc}', expected 2:\n${err}")
endif()
if(NOT err MATCHES "MEMWEAVE_TRACE: heap trace .*File too large")
  message(FATAL_ERROR "no word on the heap trace cut by the limit:\n${err}")
endif()
if(NOT EXISTS ${OUT}/file_size_limit.json)
  message(FATAL_ERROR "the report was not written past the file size limit:\n${err}")
endif()
