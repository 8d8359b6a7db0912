-- `start --route auto`: the route capacity_order chose at admission (`runtime/account/lane`,
-- account `-` for the runtime's own auth) and why. NULL: the caller named the runtime itself.
-- A resume copies both: a run never changes route.
ALTER TABLE executions ADD COLUMN route TEXT;
ALTER TABLE executions ADD COLUMN route_reason TEXT;
