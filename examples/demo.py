"""quiver's demo: SQL over a pandas DataFrame joined with a Parquet file, printed.

Run by `make demo` (from a scratch directory, where it writes orders.parquet).
"""

import pandas as pd
import quiver

# A Parquet file of 1M orders, written by quiver itself.
quiver.sql(
    """
    COPY (SELECT value AS id, 'user_' || (value % 7) AS name,
                 CAST(value * 37 % 1000 AS DOUBLE) / 10 AS amount
          FROM generate_series(1, 1000000)) TO 'orders.parquet'
    """
)

# A DataFrame already in the process: found by its variable name, read without copying.
customers = pd.DataFrame(
    {
        "name": [f"user_{i}" for i in range(7)],
        "city": ["Paris", "Berlin", "Rome", "Madrid", "Lisbon", "Vienna", "Oslo"],
    }
)

result = quiver.sql(
    """
    SELECT c.city, count(*) AS orders, round(sum(o.amount), 2) AS revenue
    FROM 'orders.parquet' o JOIN customers c USING (name)
    GROUP BY c.city ORDER BY revenue DESC
    """
)
result.show()
print(f"{result.elapsed:.3f} s, {result.rows_read:,} rows read")
print(result.df().head(3))
