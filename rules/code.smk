# code: rules are added by the code benchmark work.
