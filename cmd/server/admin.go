package main

import (
	"context"
	"errors"
	"fmt"
)

func runsCmd(context.Context, Env, []string) error {
	return errors.New("runs: needs the durable run store (not in this build yet)")
}

func gcCmd(context.Context, Env, []string) error {
	return fmt.Errorf("gc: needs the durable run store (not in this build yet)")
}
