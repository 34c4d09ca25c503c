package chat

import "context"

type clientKey struct{}

// WithClient names the client a call comes from (the transport uses its
// IP address): the runs it starts count against Config.MaxRunsPerClient,
// so one client cannot take every run slot of the process, and the chats
// it creates (Service.CreateChat) against Config.MaxChatsPerClient.
func WithClient(ctx context.Context, client string) context.Context {
	return context.WithValue(ctx, clientKey{}, client)
}

// clientOf is the client WithClient named ("" when none).
func clientOf(ctx context.Context) string {
	c, _ := ctx.Value(clientKey{}).(string)
	return c
}
