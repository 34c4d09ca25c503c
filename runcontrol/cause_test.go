package runcontrol_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"chatgraph/runcontrol"
)

func TestParseCancelErrorReadsBackEveryCause(t *testing.T) {
	reasons := []error{runcontrol.ErrUserCancel, runcontrol.ErrShutdown, runcontrol.ErrLeaseLost, runcontrol.ErrTimeout, runcontrol.ErrSuperseded}
	for _, r := range reasons {
		for _, cause := range []error{r, fmt.Errorf("%w: after 30s (node x)", r)} {
			want, err := runcontrol.NewCancelError(runcontrol.ChatScope("c_1"), cause)
			require.NoError(t, err)
			got := runcontrol.ParseCancelError(want.Error())
			require.NotNil(t, got, want.Error())
			require.Equal(t, want, got)
			require.True(t, errors.Is(got, r))
			require.Equal(t, runcontrol.Code(r), runcontrol.Code(got))
		}
	}
	for _, text := range []string{"", "cancelled", "run cancelled (nope via chat:c): x", "run cancelled (user_cancel via nowhere): x", "run cancelled (user_cancel chat:c)"} {
		require.Nil(t, runcontrol.ParseCancelError(text), text)
	}
}
