# Included by ctest after the discovered tests (TEST_INCLUDE_FILES): the tests of ptune_tests that
# time something against another program on this machine run alone, as the verdicts tests do.
# Beside another test on the sibling hardware thread, one side of a comparison can run 10-20%
# slower for the whole test (the CPU calibration against torch.mm: 0.12 and 0.20 apart in two
# ctest -j2 runs, within 0.10 alone).
set_tests_properties("peak: the CPU calibration agrees with torch.mm timed in Python" PROPERTIES RUN_SERIAL TRUE)
# The verdicts test of a sweep beside a busy process measures under competing load on purpose:
# other tests beside it are more of that load (every row is flagged either way), so it need not
# hold the machine to itself; its cost (seconds) starts it early, beside the others, not alone at
# the end.
set_tests_properties(
  "verdicts:competing load is flagged in every format, and A/A is still not called faster or slower"
  PROPERTIES RUN_SERIAL FALSE COST 33)
