        check=False,
