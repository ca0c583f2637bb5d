"""The bottom floor: one definition of every contract that more than one package relies on."""
