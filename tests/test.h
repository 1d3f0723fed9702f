/* tests/test.h: the test harness. Each CHECK prints file:line and both values
 * on failure; TEST_DONE() prints "<file>: N passed, M failed" and gives the
 * exit status (0 when nothing failed). One binary per module. */
#ifndef PAGECHAT_TEST_H
#define PAGECHAT_TEST_H
#include <math.h>
#include <stdio.h>

static int test_pass_, test_fail_;
#define CHECK_(ok, ...) do { if (ok) test_pass_++; else { test_fail_++; \
	fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
#define CHECK(c) CHECK_((c), "%s", #c)
#define CHECK_EQ_INT(a, b) do { long long a_ = (a), b_ = (b); \
	CHECK_(a_ == b_, "%s == %s (%lld vs %lld)", #a, #b, a_, b_); } while (0)
#define CHECK_NEAR(a, b, tol) do { double a_ = (a), b_ = (b); \
	CHECK_(fabs(a_ - b_) <= (tol), "%s ~ %s (%g vs %g, tol %g)", #a, #b, a_, b_, (double)(tol)); } while (0)
#define TEST_DONE() (printf("%s: %d passed, %d failed\n", __FILE__, test_pass_, test_fail_), \
	test_fail_ != 0)
#endif
