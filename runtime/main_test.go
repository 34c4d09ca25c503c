package runtime_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// Executors abandoned after ignoring cancellation are released by their
	// tests' deferred cleanup before the process ends.
	goleak.VerifyTestMain(m)
}
