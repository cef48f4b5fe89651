# bfcl: rules are added by the bfcl benchmark work.
