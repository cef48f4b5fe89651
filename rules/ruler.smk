# ruler: rules are added by the ruler benchmark work.
