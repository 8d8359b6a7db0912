"""Pure domain: ids, states, transitions, failure kinds, errors and view models. No I/O."""
