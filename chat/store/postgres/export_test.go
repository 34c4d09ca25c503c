package postgres

// OwnerLockKey is the advisory lock CreateChat takes for owner in schema.
func OwnerLockKey(schema, owner string) int64 { return lockKey(schema, "chat owner", owner) }
