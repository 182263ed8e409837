"""What a run produces and how it is read: the records (`records`), the store's column
order (`storeformat`), each per-request metric's formula (`formulas`), why the instrument
ended a request (`reasons`) and the exact binomial rule of every verdict (`binomial`)."""
