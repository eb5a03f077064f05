"""What the data set is: its files and their checks, the index kept between starts, copies, shards, the sample set."""
