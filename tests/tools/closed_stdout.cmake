# `memweave train ... | true`: standard output closed before the run writes to it. The
# run must still write its files (--json, --save) and say why it failed (exit 2), not die of
# SIGPIPE (exit 141 from a shell) with nothing written.
file(REMOVE ${OUT}/closed_stdout.json ${OUT}/closed_stdout.ckpt)
execute_process(
  COMMAND ${MEMWEAVE} train --net resnet:1,1,1,1 --width 0.0625 --classes 5 --image-side 32
          --batch 4 --device host --conv-ws fixed:direct --iterations 2 --policy liveness
          --json ${OUT}/closed_stdout.json --save ${OUT}/closed_stdout.ckpt
  COMMAND true
  RESULTS_VARIABLE rcs ERROR_VARIABLE err)
list(GET rcs 0 rc)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "memweave with its standard output closed exited '${rc}', expected 2:\n${err}")
endif()
if(NOT err MATCHES "standard output could not be written")
  message(FATAL_ERROR "no word on the failed standard output:\n${err}")
endif()
foreach(f closed_stdout.json closed_stdout.ckpt)
  if(NOT EXISTS ${OUT}/${f})
    message(FATAL_ERROR "${f} was not written with standard output closed:\n${err}")
  endif()
endforeach()
